#!/usr/bin/env python3
"""Consumes fired timers and acts on each fire once.

ktimer delivers at least once: a fire can arrive twice (a crash between producing it and
recording it). Every fired record carries the header `ktimer-fire-id`, the same on every
retry and replay, so the consumer keeps the ids it acted on and skips the ones it has seen.
Here that is a set in memory; a real consumer keeps them where its effect is written (a
unique key in the same database transaction, or `SET fire:<id> 1 NX EX 86400` in Redis).

    python3 consume_fired.py --brokers 127.0.0.1:19092 --count 3

A record's value is the timer's payload itself (mode RAW), or a FiredEvent envelope.

A timer created in a trace (a W3C `traceparent` header on its command) fires as a child
span of the creating one: the record's `traceparent` has the same trace id and a span id
of the fire's own. Continue the trace from it; with OpenTelemetry:

    ctx = opentelemetry.propagate.extract(headers)
    with tracer.start_as_current_span("handle fire", context=ctx): ...

Here the trace and span ids are printed."""
import argparse
import time

from confluent_kafka import Consumer

from ktimer_avro import CONSUMER_CONFIG, codecs


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--brokers", default="127.0.0.1:9092")
    p.add_argument("--fired-topic", default="ktimer.fired")
    p.add_argument("--group", default="ktimer-example-fired")
    p.add_argument("--schema-registry-url", help="fired records in the Confluent wire format, through this registry")
    p.add_argument("--count", type=int, default=0, help="stop after this many fires acted on (0: never)")
    p.add_argument("--timeout-s", type=float, default=60, help="give up after this long without one")
    a = p.parse_args()

    fired_codec = codecs(a.schema_registry_url)[2]
    consumer = Consumer({"bootstrap.servers": a.brokers, "group.id": a.group, **CONSUMER_CONFIG})
    consumer.subscribe([a.fired_topic])
    seen = set()
    acted = 0
    last = time.monotonic()
    try:
        while (a.count == 0 or acted < a.count) and time.monotonic() - last < a.timeout_s:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                print(f"error {msg.error()}")
                continue
            headers = {k: (v or b"").decode() for k, v in (msg.headers() or [])}
            fire_id = headers.get("ktimer-fire-id")
            if fire_id in seen:
                print(f"duplicate skipped {fire_id}")
                continue
            seen.add(fire_id)
            value = msg.value() or b""
            if fired_codec.is_framed(value):
                payload = fired_codec.decode(value, msg.topic())["payload"]
            else:
                payload = value
            due, fired = int(headers["ktimer-due-ms"]), int(headers["ktimer-fired-ms"])
            trace = ""
            if "traceparent" in headers:
                _, trace_id, span_id, _ = headers["traceparent"].split("-")
                trace = f" trace={trace_id} span={span_id}"
            print(f"fired {headers['ktimer-timer-id']} fire_id={fire_id} late={fired - due}ms "
                  f"payload={payload.decode(errors='replace')!r}{trace}", flush=True)
            acted += 1
            last = time.monotonic()
    finally:
        consumer.close()
    if a.count and acted < a.count:
        raise SystemExit(f"only {acted} of {a.count} fires within {a.timeout_s} s")


if __name__ == "__main__":
    main()
