#!/usr/bin/env node
// Reads the results of commands: every command ktimer reads gets one, ACCEPTED, DUPLICATE or
// REJECTED with a reason, with the timer's new state.
//
//   node read_results.mjs --brokers 127.0.0.1:19092 --count 3
import { parseArgs } from 'node:util';
import { codecs, consume, kafka } from './ktimer_avro.mjs';

const { values: a } = parseArgs({
  options: {
    brokers: { type: 'string', default: '127.0.0.1:9092' },
    'results-topic': { type: 'string', default: 'ktimer.results' },
    group: { type: 'string', default: 'ktimer-example-results' },
    'schema-registry-url': { type: 'string' },
    count: { type: 'string', default: '0' },
    'timeout-s': { type: 'string', default: '60' },
  },
});
const want = Number(a.count);
const codec = codecs(a['schema-registry-url']).result;
let got = 0;
await consume(kafka(a.brokers, 'ktimer-node-results'), a['results-topic'], a.group, Number(a['timeout-s']),
  async (m) => {
    const r = await codec.decode(m.value, a['results-topic']);
    const reason = r.reason ? ` reason=${JSON.stringify(r.reason)}` : '';
    console.log(`result ${r.timer_id} ${r.kind} ${r.outcome} state=${r.state}${reason}`);
    got += 1;
  },
  () => want > 0 && got >= want);
if (want > 0 && got < want) {
  console.error(`only ${got} of ${want} results within ${a['timeout-s']} s`);
  process.exit(1);
}
