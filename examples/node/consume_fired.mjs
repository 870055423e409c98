#!/usr/bin/env node
// Consumes fired timers and acts on each fire once.
//
// ktimer delivers at least once: a fire can arrive twice (a crash between producing it and
// recording it). Every fired record carries the header `ktimer-fire-id`, the same on every
// retry and replay, so the consumer keeps the ids it acted on and skips the ones it has seen.
// Here that is a Set in memory; a real consumer keeps them where its effect is written (a
// unique key in the same database transaction, or `SET fire:<id> 1 NX EX 86400` in Redis).
//
// A timer created in a W3C trace fires as a child span of the creating one (`traceparent`:
// the same trace id, a span id of the fire's own). With OpenTelemetry, continue it:
//   const ctx = propagation.extract(ROOT_CONTEXT, headers);
//   tracer.startActiveSpan('handle fire', {}, ctx, (span) => { ...; span.end(); });
// Here the trace and span ids are printed.
//
//   node consume_fired.mjs --brokers 127.0.0.1:19092 --count 3
import { parseArgs } from 'node:util';
import { codecs, consume, kafka, textHeaders } from './ktimer_avro.mjs';

const { values: a } = parseArgs({
  options: {
    brokers: { type: 'string', default: '127.0.0.1:9092' },
    'fired-topic': { type: 'string', default: 'ktimer.fired' },
    group: { type: 'string', default: 'ktimer-example-fired' },
    'schema-registry-url': { type: 'string' },
    count: { type: 'string', default: '0' },
    'timeout-s': { type: 'string', default: '60' },
  },
});
const want = Number(a.count);
const codec = codecs(a['schema-registry-url']).fired;
const seen = new Set();
let acted = 0;
await consume(kafka(a.brokers, 'ktimer-node-fired'), a['fired-topic'], a.group, Number(a['timeout-s']),
  async (m) => {
    const h = textHeaders(m);
    const fireId = h['ktimer-fire-id'];
    if (seen.has(fireId)) {
      console.log(`duplicate skipped ${fireId}`);
      return;
    }
    seen.add(fireId);
    const value = m.value ?? Buffer.alloc(0);
    const payload = codec.isFramed(value) ? (await codec.decode(value, a['fired-topic'])).payload : value;
    const late = Number(h['ktimer-fired-ms']) - Number(h['ktimer-due-ms']);
    let trace = '';
    if (h.traceparent) {
      const [, traceId, spanId] = h.traceparent.split('-');
      trace = ` trace=${traceId} span=${spanId}`;
    }
    console.log(`fired ${h['ktimer-timer-id']} fire_id=${fireId} late=${late}ms payload='${payload.toString()}'${trace}`);
    acted += 1;
  },
  () => want > 0 && acted >= want);
if (want > 0 && acted < want) {
  console.error(`only ${acted} of ${want} fires within ${a['timeout-s']} s`);
  process.exit(1);
}
