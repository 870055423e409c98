#!/usr/bin/env python3
"""Reads the results of commands: every command ktimer reads gets one, ACCEPTED, DUPLICATE
or REJECTED with a reason, with the timer's new state.

    python3 read_results.py --brokers 127.0.0.1:19092 --count 3"""
import argparse
import time

from confluent_kafka import Consumer

from ktimer_avro import CONSUMER_CONFIG, codecs


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--brokers", default="127.0.0.1:9092")
    p.add_argument("--results-topic", default="ktimer.results")
    p.add_argument("--group", default="ktimer-example-results")
    p.add_argument("--schema-registry-url", help="results in the Confluent wire format, through this registry")
    p.add_argument("--count", type=int, default=0, help="stop after this many results (0: never)")
    p.add_argument("--timeout-s", type=float, default=60, help="give up after this long without one")
    a = p.parse_args()

    result_codec = codecs(a.schema_registry_url)[1]
    consumer = Consumer({"bootstrap.servers": a.brokers, "group.id": a.group, **CONSUMER_CONFIG})
    consumer.subscribe([a.results_topic])
    got = 0
    last = time.monotonic()
    try:
        while (a.count == 0 or got < a.count) and time.monotonic() - last < a.timeout_s:
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            r = result_codec.decode(msg.value(), msg.topic())
            reason = f" reason={r['reason']!r}" if r.get("reason") else ""
            print(f"result {r['timer_id']} {r['kind']} {r['outcome']} state={r['state']}{reason}", flush=True)
            got += 1
            last = time.monotonic()
    finally:
        consumer.close()
    if a.count and got < a.count:
        raise SystemExit(f"only {got} of {a.count} results within {a.timeout_s} s")


if __name__ == "__main__":
    main()
