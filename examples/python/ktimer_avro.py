"""ktimer's records in Avro with the schemas in schemas/, in either of ktimer's encodings.

Without a schema registry (ktimer's default): single-object encoding with fastavro. A record
is 0xC3 0x01, the 8-byte CRC-64-AVRO fingerprint of the schema's Parsing Canonical Form
(little-endian), then the Avro binary body.

With a schema registry (ktimer run --schema-registry-url): the Confluent wire format through
confluent-kafka's own AvroSerializer and AvroDeserializer (a 0 byte, the 4-byte schema id, the
body); the schema is registered under the topic's subject, TOPIC-value.

    command, result, fired = codecs(registry_url)   # registry_url None: single-object
    value = command.encode(record, topic)"""
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

    def encode(self, record, topic=None):
        out = io.BytesIO()
        out.write(self.header)
        schemaless_writer(out, self.schema, record)
        return out.getvalue()

    def is_framed(self, data):
        """Whether `data` is a record of this codec's encoding (a fired record may be raw)."""
        return data.startswith(self.header)

    def decode(self, data, topic=None):
        if not data.startswith(self.header):
            raise ValueError(f"not a single-object record of this schema: {data[:10].hex(' ')}")
        return schemaless_reader(io.BytesIO(data[len(self.header):]), self.schema)


COMMAND = Codec("timer_command.avsc")
RESULT = Codec("command_result.avsc")
FIRED = Codec("fired_event.avsc")


class Registered:
    """One schema in the Confluent wire format, through a schema registry."""

    def __init__(self, client, name):
        # Imported here: only this path needs confluent-kafka's schema registry extras
        # (pip install "confluent-kafka[schemaregistry]").
        from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer

        with open(os.path.join(SCHEMAS, name)) as f:
            schema = f.read()
        self.serializer = AvroSerializer(client, schema)
        self.deserializer = AvroDeserializer(client, schema)

    @staticmethod
    def _context(topic):
        from confluent_kafka.serialization import MessageField, SerializationContext

        return SerializationContext(topic, MessageField.VALUE)

    def encode(self, record, topic):
        return self.serializer(record, self._context(topic))

    def is_framed(self, data):
        return len(data) > 5 and data[0] == 0

    def decode(self, data, topic):
        return self.deserializer(data, self._context(topic))


def codecs(registry_url=None):
    """The (command, result, fired) codecs: single-object, or with a registry its wire format."""
    if not registry_url:
        return COMMAND, RESULT, FIRED
    from confluent_kafka.schema_registry import SchemaRegistryClient

    client = SchemaRegistryClient({"url": registry_url})
    return tuple(Registered(client, n) for n in
                 ("timer_command.avsc", "command_result.avsc", "fired_event.avsc"))

# ktimer maps a timer id to a partition with Java's murmur2 (its default); librdkafka
# clients must say so, or a command lands in another partition than its timer.
PRODUCER_CONFIG = {"partitioner": "murmur2_random", "enable.idempotence": True}

# Consumers poll at least every few seconds, so a short poll interval costs nothing and a
# consumer that hangs leaves the group soon; some brokers (Tansu) also make a first join wait
# the whole interval.
CONSUMER_CONFIG = {"auto.offset.reset": "earliest", "enable.auto.commit": True,
                   "max.poll.interval.ms": 10000, "session.timeout.ms": 10000}
