#!/usr/bin/env node
// Produces ktimer commands: a one-shot timer, a cron timer in a time zone, an interval timer,
// a cancel; any timer may spread its fires with --jitter-ms.
//
//   node producer.mjs --brokers 127.0.0.1:19092 once order-42 --delay-ms 5000 --payload "close order 42"
//   node producer.mjs --brokers 127.0.0.1:19092 cron standup --cron "0 30 9 * * Mon-Fri" --time-zone Europe/Berlin
//   node producer.mjs --brokers 127.0.0.1:19092 every heartbeat --every-ms 90000 --jitter-ms 5000
//   node producer.mjs --brokers 127.0.0.1:19092 cancel standup
//
// Each command is keyed by its timer id; its result arrives on the results topic
// (read_results.mjs). --traceparent sends it in a W3C trace: its result and fires continue it.
import { randomUUID } from 'node:crypto';
import { parseArgs } from 'node:util';
import { codecs, kafka, PRODUCER } from './ktimer_avro.mjs';

const { values: a, positionals } = parseArgs({
  allowPositionals: true,
  options: {
    brokers: { type: 'string', default: '127.0.0.1:9092' },
    'commands-topic': { type: 'string', default: 'ktimer.commands' },
    application: { type: 'string', default: 'default' },
    'schema-registry-url': { type: 'string' },
    traceparent: { type: 'string' },
    'delay-ms': { type: 'string', default: '5000' },
    cron: { type: 'string' },
    'time-zone': { type: 'string', default: 'UTC' },
    'every-ms': { type: 'string' },
    'start-ms': { type: 'string' },
    'max-fires': { type: 'string' },
    'jitter-ms': { type: 'string' },
    payload: { type: 'string', default: '' },
    'callback-topic': { type: 'string' },
  },
});
const [what, timerId] = positionals;
const number = (v) => (v === undefined ? null : Number(v));
const callback = {
  topic: a['callback-topic'] ?? null,
  key: null,
  headers: {},
  payload: Buffer.from(a.payload),
  mode: 'RAW',
};
const cmd = { request_id: `node-${randomUUID().slice(0, 16)}`, timer_id: timerId, application: a.application };
switch (what) {
  case 'once':
    Object.assign(cmd, { kind: 'CREATE_ONCE', delay_ms: number(a['delay-ms']), callback });
    break;
  case 'cron':
    if (!a.cron) throw new Error('cron needs --cron');
    Object.assign(cmd, { kind: 'CREATE_CRON', cron: a.cron, time_zone: a['time-zone'], callback });
    break;
  case 'every':
    Object.assign(cmd, {
      kind: 'CREATE_CRON',
      every_ms: number(a['every-ms']),
      start_ms: number(a['start-ms']),
      max_fires: number(a['max-fires']),
      callback,
    });
    break;
  case 'cancel':
    cmd.kind = 'CANCEL';
    break;
  default:
    throw new Error('usage: producer.mjs [--brokers B] once|cron|every|cancel TIMER_ID [options]');
}
if (what !== 'cancel' && a['jitter-ms']) cmd.jitter_ms = number(a['jitter-ms']);

const topic = a['commands-topic'];
const value = await codecs(a['schema-registry-url']).command.encode(cmd, topic);
// With OpenTelemetry, inject the current span instead:
//   const carrier = {}; propagation.inject(context.active(), carrier); headers = carrier;
const headers = a.traceparent ? { traceparent: a.traceparent } : {};
const producer = kafka(a.brokers, 'ktimer-node-producer').producer(PRODUCER);
await producer.connect();
const [sent] = await producer.send({ topic, messages: [{ key: timerId, value, headers }] });
await producer.disconnect();
const encoding = value[0] === 0 ? `confluent schema-id=${value.readUInt32BE(1)}` : 'single-object';
console.log(`sent ${cmd.kind} timer=${timerId} request=${cmd.request_id} -> ${topic}[${sent.partition}]@${sent.baseOffset} (${encoding})`);
