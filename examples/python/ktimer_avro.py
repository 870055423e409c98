"""Avro single-object encoding of ktimer's records with fastavro and the schemas in schemas/.

A record is 0xC3 0x01, the 8-byte CRC-64-AVRO fingerprint of the schema's Parsing Canonical
Form (little-endian), then the Avro binary body. ktimer reads and writes exactly this when no
schema registry is configured."""
import io
import json
import os

from fastavro import parse_schema, schemaless_reader, schemaless_writer
from fastavro.schema import fingerprint, to_parsing_canonical_form

SCHEMAS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "schemas")
MAGIC = b"\xc3\x01"


class Codec:
    """One schema: encode and decode its single-object records."""

    def __init__(self, name):
        with open(os.path.join(SCHEMAS, name)) as f:
            raw = json.load(f)
        self.schema = parse_schema(raw)
        pcf = to_parsing_canonical_form(raw)
        self.header = MAGIC + bytes.fromhex(fingerprint(pcf, "CRC-64-AVRO"))

    def encode(self, record):
        out = io.BytesIO()
        out.write(self.header)
        schemaless_writer(out, self.schema, record)
        return out.getvalue()

    def decode(self, data):
        if not data.startswith(self.header):
            raise ValueError(f"not a single-object record of this schema: {data[:10].hex(' ')}")
        return schemaless_reader(io.BytesIO(data[len(self.header):]), self.schema)


COMMAND = Codec("timer_command.avsc")
RESULT = Codec("command_result.avsc")
FIRED = Codec("fired_event.avsc")

# ktimer maps a timer id to a partition with Java's murmur2 (its default); librdkafka
# clients must say so, or a command lands in another partition than its timer.
PRODUCER_CONFIG = {"partitioner": "murmur2_random", "enable.idempotence": True}

# Consumers poll at least every few seconds, so a short poll interval costs nothing and a
# consumer that hangs leaves the group soon; some brokers (Tansu) also make a first join wait
# the whole interval.
CONSUMER_CONFIG = {"auto.offset.reset": "earliest", "enable.auto.commit": True,
                   "max.poll.interval.ms": 10000, "session.timeout.ms": 10000}
