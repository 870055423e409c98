// Validates an AsyncAPI document (default: the repository's asyncapi.yaml): the document
// against the AsyncAPI 3.0 specification with the AsyncAPI parser (its Avro schema parser
// turns each Avro payload into a JSON Schema), and every Avro schema file it names with
// avsc, an independent Avro implementation. Prints the channels and their messages;
// exits non-zero on any error.
import { Parser, fromFile } from '@asyncapi/parser';
import { AvroSchemaParser } from '@asyncapi/avro-schema-parser';
import avro from 'avsc';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import path from 'node:path';

const here = path.dirname(fileURLToPath(import.meta.url));
const file = path.resolve(process.argv[2] ?? path.join(here, '..', '..', 'asyncapi.yaml'));
const fail = (why) => {
  console.error(`asyncapi: ${file}: ${why}`);
  process.exit(1);
};

const parser = new Parser();
parser.registerSchemaParser(AvroSchemaParser());
const { document, diagnostics } = await fromFile(parser, file).parse();
for (const d of diagnostics.filter((d) => d.severity <= 1)) {
  console.log(`${d.severity === 0 ? 'error' : 'warning'}: ${d.message} at ${d.path.join('/')}`);
}
if (!document || diagnostics.some((d) => d.severity === 0)) {
  fail('not valid AsyncAPI');
}

// Every Avro schema file the document names, read by avsc.
const refs = [...readFileSync(file, 'utf8').matchAll(/\$ref: '(\.\/[^']+\.avsc)'/g)].map((m) => m[1]);
if (refs.length === 0) {
  fail('names no Avro schema');
}
for (const ref of new Set(refs)) {
  try {
    const type = avro.Type.forSchema(JSON.parse(readFileSync(path.join(path.dirname(file), ref), 'utf8')));
    console.log(`avro ${ref}: ${type.name}`);
  } catch (e) {
    fail(`${ref} is not a valid Avro schema: ${e.message}`);
  }
}

for (const channel of document.channels()) {
  const messages = channel.messages().all().map((m) => m.name() ?? m.id());
  console.log(`channel ${channel.id()} (${channel.address() ?? 'any topic'}): ${messages.join(', ')}`);
}
console.log(`asyncapi: ${file} is valid AsyncAPI ${document.version()}`);
