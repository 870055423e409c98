// ktimer's records in Avro with the schemas in schemas/, with avsc.
//
// Without a schema registry (ktimer's default): Avro single-object encoding. A record is
// 0xC3 0x01, the 8-byte CRC-64-AVRO fingerprint of the schema's Parsing Canonical Form
// (little-endian), then the Avro binary body.
//
// With a schema registry (ktimer run --schema-registry-url): the Confluent wire format, a 0
// byte, the schema id (4 bytes, big-endian), the body; the schema is registered under the
// topic's subject, TOPIC-value, through the registry's REST API.
//
//   const { command, result, fired } = await codecs(registryUrl);   // undefined: single-object
//   const value = await command.encode(record, topic);
import avro from 'avsc';
import kafkajs from 'kafkajs';
import { readFileSync } from 'node:fs';

const { Kafka, Partitioners, logLevel } = kafkajs;

const SCHEMAS = new URL('../../schemas/', import.meta.url);

// CRC-64-AVRO (the Avro specification's Rabin fingerprint), as a little-endian Buffer.
const EMPTY = 0xc15d213aa4d7a795n;
const TABLE = Array.from({ length: 256 }, (_, i) => {
  let fp = BigInt(i);
  for (let j = 0; j < 8; j++) fp = (fp >> 1n) ^ (EMPTY & -(fp & 1n));
  return fp;
});
export function fingerprint(text) {
  let fp = EMPTY;
  for (const b of Buffer.from(text, 'utf8')) fp = (fp >> 8n) ^ TABLE[Number((fp ^ BigInt(b)) & 0xffn)];
  const out = Buffer.alloc(8);
  out.writeBigUInt64LE(BigInt.asUintN(64, fp));
  return out;
}

// The Parsing Canonical Form avsc gives (logical types dropped, as the specification says).
function canonical(type) {
  return JSON.stringify(type.schema());
}

/** One schema in single-object encoding. */
class SingleObject {
  constructor(file) {
    this.type = avro.Type.forSchema(JSON.parse(readFileSync(new URL(file, SCHEMAS))));
    this.header = Buffer.concat([Buffer.from([0xc3, 0x01]), fingerprint(canonical(this.type))]);
  }
  async encode(record) {
    return Buffer.concat([this.header, this.type.toBuffer(record)]);
  }
  /** Whether `data` is a record of this encoding (a fired record may be a raw payload). */
  isFramed(data) {
    return data.subarray(0, 10).equals(this.header);
  }
  async decode(data) {
    if (!this.isFramed(data)) throw new Error(`not a single-object record of this schema: ${data.subarray(0, 10).toString('hex')}`);
    return this.type.fromBuffer(data.subarray(10));
  }
}

/** One schema in the Confluent wire format, through a schema registry's REST API. */
class Registered {
  constructor(url, file) {
    this.url = url.replace(/\/$/, '');
    this.text = readFileSync(new URL(file, SCHEMAS), 'utf8');
    this.type = avro.Type.forSchema(JSON.parse(this.text));
    this.ids = new Map(); // subject -> schema id
    this.writers = new Map(); // schema id -> avsc type of the writer
  }
  async encode(record, topic) {
    const subject = `${topic}-value`;
    if (!this.ids.has(subject)) {
      const res = await fetch(`${this.url}/subjects/${encodeURIComponent(subject)}/versions`, {
        method: 'POST',
        headers: { 'content-type': 'application/vnd.schemaregistry.v1+json' },
        body: JSON.stringify({ schema: this.text }),
      });
      if (!res.ok) throw new Error(`registering ${subject}: ${res.status} ${await res.text()}`);
      this.ids.set(subject, (await res.json()).id);
    }
    const head = Buffer.alloc(5);
    head.writeUInt32BE(this.ids.get(subject), 1);
    return Buffer.concat([head, this.type.toBuffer(record)]);
  }
  isFramed(data) {
    return data.length > 5 && data[0] === 0;
  }
  async decode(data) {
    const id = data.readUInt32BE(1);
    if (!this.writers.has(id)) {
      const res = await fetch(`${this.url}/schemas/ids/${id}`);
      if (!res.ok) throw new Error(`schema ${id}: ${res.status} ${await res.text()}`);
      const writer = avro.Type.forSchema(JSON.parse((await res.json()).schema));
      this.writers.set(id, this.type.createResolver(writer));
    }
    return this.type.fromBuffer(data.subarray(5), this.writers.get(id));
  }
}

const FILES = { command: 'timer_command.avsc', result: 'command_result.avsc', fired: 'fired_event.avsc' };

/** The command, result and fired codecs: single-object, or with a registry its wire format. */
export function codecs(registryUrl) {
  const make = (f) => (registryUrl ? new Registered(registryUrl, f) : new SingleObject(f));
  return Object.fromEntries(Object.entries(FILES).map(([k, f]) => [k, make(f)]));
}

/** The broker list of `--brokers`. */
export function brokers(text) {
  return text.split(',').map((b) => b.trim());
}

/** kafkajs settings: quiet logs, and the Java client's murmur2 partitioner, as ktimer maps ids. */
export function kafka(brokerList, clientId) {
  return new Kafka({ clientId, brokers: brokers(brokerList), logLevel: logLevel.ERROR });
}

/** The producer settings: Java's murmur2 (kafkajs's default), as ktimer partitions ids, and
 * one request in flight so retries keep the order of a timer's commands. (kafkajs's
 * idempotent producer is experimental and not every broker answers its InitProducerId; a
 * command sent twice is harmless: its request id makes the second a DUPLICATE.) */
export const PRODUCER = { createPartitioner: Partitioners.DefaultPartitioner, maxInFlightRequests: 1 };

/** Reads `topic` from the start in group `groupId`, calling `each(message)` until `done()`
 * or `timeoutS` seconds without a message; disconnects. */
export async function consume(client, topic, groupId, timeoutS, each, done) {
  const consumer = client.consumer({ groupId, sessionTimeout: 10000 });
  await consumer.connect();
  await consumer.subscribe({ topic, fromBeginning: true });
  let last = Date.now();
  let failed;
  await consumer.run({
    eachMessage: async ({ message }) => {
      last = Date.now();
      try {
        await each(message);
      } catch (e) {
        failed = e;
      }
    },
  });
  while (!done() && !failed && Date.now() - last < timeoutS * 1000) {
    await new Promise((r) => setTimeout(r, 100));
  }
  await consumer.disconnect();
  if (failed) throw failed;
}

/** A record's headers as text. */
export function textHeaders(message) {
  return Object.fromEntries(Object.entries(message.headers || {}).map(([k, v]) => [k, v == null ? '' : v.toString()]));
}
