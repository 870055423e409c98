"""The timer command schema's evolution, checked by an independent Avro implementation
(fastavro): run by tests/schema_evolution.rs.

  write OLD_SCHEMA             prints the hex of a single-object command written with OLD_SCHEMA
  resolve WRITER READER HEX    reads the datum HEX (no header) written with WRITER as READER
                               (Avro schema resolution, what a registry's compatibility check
                               decides), prints it as JSON
"""

import io
import json
import sys

import fastavro
from fastavro.schema import fingerprint, to_parsing_canonical_form


def schema(path):
    with open(path) as f:
        return fastavro.parse_schema(json.load(f))


def command():
    return {
        "request_id": "r-old",
        "timer_id": "t-old",
        "application": "app",
        "kind": "CREATE_CRON",
        "at_ms": None,
        "delay_ms": None,
        "cron": "*/5 * * * * *",
        "time_zone": "Europe/Berlin",
        "start_ms": None,
        "end_ms": None,
        "max_fires": 3,
        "misfire": "SKIP",
        "callback": None,
        "sent_at_ms": 1,
    }


def main():
    if sys.argv[1] == "write":
        s = schema(sys.argv[2])
        out = io.BytesIO()
        out.write(b"\xc3\x01")
        out.write(bytes.fromhex(fingerprint(to_parsing_canonical_form(s), "CRC-64-AVRO")))
        fastavro.schemaless_writer(out, s, command())
        print(out.getvalue().hex())
    elif sys.argv[1] == "resolve":
        writer, reader = schema(sys.argv[2]), schema(sys.argv[3])
        datum = io.BytesIO(bytes.fromhex(sys.argv[4]))
        value = fastavro.schemaless_reader(datum, writer, reader)
        print(json.dumps(value, default=lambda b: b.hex()))


main()
