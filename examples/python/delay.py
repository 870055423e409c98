#!/usr/bin/env python3
"""Delays any Kafka record through ktimer's delay topic: no schema, no ktimer client, headers only.

    python3 delay.py --brokers 127.0.0.1:19092 send --target orders.timeouts --delay-ms 30000 --key order-42 --value '{"order": 42}' --header trace-id=4bf92f35
    python3 delay.py --brokers 127.0.0.1:19092 send --target reminders --at-ms 1798761600000 --id reminder-7 --value "call back"
    python3 delay.py --brokers 127.0.0.1:19092 cancel reminder-7

At its time ktimer produces the record itself (the same key, value and headers, plus its
ktimer-fire-id, ktimer-due-ms and ktimer-fired-ms headers) to the target topic. The delay
counts from the record's timestamp. Without --id the record's topic/partition/offset is its
timer id (printed). Each record's result (ACCEPTED, or REJECTED with a reason) arrives on the
results topic: read_results.py."""
import argparse

from confluent_kafka import Producer


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--brokers", default="127.0.0.1:9092")
    p.add_argument("--delay-topic", default="ktimer.delay")
    p.add_argument("--application", help="the application the timer belongs to (default: default)")
    sub = p.add_subparsers(dest="what", required=True)
    send = sub.add_parser("send", help="a record delivered later")
    send.add_argument("--target", required=True, help="the topic the record is delivered to")
    when = send.add_mutually_exclusive_group(required=True)
    when.add_argument("--delay-ms", type=int, help="deliver this many ms after the record's timestamp")
    when.add_argument("--at-ms", type=int, help="deliver at this Unix epoch millisecond")
    send.add_argument("--id", help="timer id, to cancel it later (default: topic/partition/offset)")
    send.add_argument("--key", help="the record's key (default: --id)")
    send.add_argument("--value", default="", help="the record's value")
    send.add_argument("--header", action="append", default=[], help="name=value, delivered with the record (repeatable)")
    cancel = sub.add_parser("cancel", help="cancel a delayed record by its id (a tombstone)")
    cancel.add_argument("id")
    cancel.add_argument("--key", help="the key the record was sent with (default: the id)")
    a = p.parse_args()

    headers = []
    if a.what == "send":
        headers.append(("ktimer-target-topic", a.target))
        if a.delay_ms is not None:
            headers.append(("ktimer-delay-ms", str(a.delay_ms)))
        else:
            headers.append(("ktimer-at-ms", str(a.at_ms)))
        headers += [tuple(h.split("=", 1)) for h in a.header]
        value, key = a.value.encode(), a.key if a.key is not None else a.id
    else:
        # The same key as the record it cancels: the same partition, so it cannot overtake it.
        value, key = None, a.key if a.key is not None else a.id
    timer_id = a.id
    if timer_id:
        headers.append(("ktimer-timer-id", timer_id))
    if a.application:
        headers.append(("ktimer-application", a.application))

    def report(err, msg):
        if err is not None:
            raise SystemExit(f"not delivered: {err}")
        origin = f"{msg.topic()}/{msg.partition()}/{msg.offset()}"
        print(f"sent {origin} timer {timer_id or origin}", flush=True)

    producer = Producer({"bootstrap.servers": a.brokers})
    producer.produce(a.delay_topic, value=value, key=key, headers=headers, on_delivery=report)
    if producer.flush(30) != 0:
        raise SystemExit("not delivered within 30 s")


if __name__ == "__main__":
    main()
