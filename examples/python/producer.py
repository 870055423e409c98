#!/usr/bin/env python3
"""Produces ktimer commands: a one-shot timer, a cron timer in a time zone, an interval
timer, a cancel; any timer may spread its fires with --jitter-ms.

    python3 producer.py --brokers 127.0.0.1:19092 once order-42 --delay-ms 5000 --payload "close order 42"
    python3 producer.py --brokers 127.0.0.1:19092 cron standup --cron "0 30 9 * * Mon-Fri" --time-zone Europe/Berlin
    python3 producer.py --brokers 127.0.0.1:19092 every heartbeat --every-ms 90000 --jitter-ms 5000
    python3 producer.py --brokers 127.0.0.1:19092 cancel standup

Each command is keyed by its timer id; its result arrives on the results topic (read_results.py)."""
import argparse
import uuid

from confluent_kafka import Producer

from ktimer_avro import PRODUCER_CONFIG, codecs


def command(kind, timer_id, application, **fields):
    cmd = {
        "request_id": f"py-{uuid.uuid4().hex[:16]}",
        "timer_id": timer_id,
        "application": application,
        "kind": kind,
    }
    cmd.update(fields)
    return cmd


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--brokers", default="127.0.0.1:9092")
    p.add_argument("--commands-topic", default="ktimer.commands")
    p.add_argument("--application", default="default")
    p.add_argument("--schema-registry-url", help="encode in the Confluent wire format through this registry")
    p.add_argument("--traceparent", help="W3C trace context of the sending span: its result and fires continue the trace")
    sub = p.add_subparsers(dest="what", required=True)
    once = sub.add_parser("once", help="a one-shot timer")
    once.add_argument("timer_id")
    once.add_argument("--delay-ms", type=int, default=5000)
    once.add_argument("--payload", default="")
    once.add_argument("--callback-topic", help="where to deliver (default: the fired topic)")
    cron = sub.add_parser("cron", help="a cron timer")
    cron.add_argument("timer_id")
    cron.add_argument("--cron", required=True, help="with seconds: sec min hour day month weekday")
    cron.add_argument("--time-zone", default="UTC")
    cron.add_argument("--payload", default="")
    every = sub.add_parser("every", help="an interval timer: every N ms, without drift")
    every.add_argument("timer_id")
    every.add_argument("--every-ms", type=int, required=True)
    every.add_argument("--start-ms", type=int, help="the first fire (default: one interval from now)")
    every.add_argument("--max-fires", type=int)
    every.add_argument("--payload", default="")
    for timer in (once, cron, every):
        timer.add_argument("--jitter-ms", type=int, help="each fire up to this much later, fixed per timer and fire")
    for timer in (cron, every):
        timer.add_argument("--calendar", help="an exclusion calendar of ktimer's applications file")
        timer.add_argument("--defer-excluded", action="store_true", help="fire excluded occurrences after the exclusion")
    cancel = sub.add_parser("cancel", help="cancel a timer")
    cancel.add_argument("timer_id")
    a = p.parse_args()

    if a.what == "once":
        callback = {"payload": a.payload.encode(), "mode": "RAW"}
        if a.callback_topic:
            callback["topic"] = a.callback_topic
        cmd = command("CREATE_ONCE", a.timer_id, a.application, delay_ms=a.delay_ms, callback=callback)
    elif a.what == "cron":
        cmd = command("CREATE_CRON", a.timer_id, a.application, cron=a.cron, time_zone=a.time_zone,
                      callback={"payload": a.payload.encode(), "mode": "RAW"})
    elif a.what == "every":
        cmd = command("CREATE_CRON", a.timer_id, a.application, every_ms=a.every_ms, start_ms=a.start_ms,
                      max_fires=a.max_fires, callback={"payload": a.payload.encode(), "mode": "RAW"})
    else:
        cmd = command("CANCEL", a.timer_id, a.application)
    if getattr(a, "jitter_ms", None):
        cmd["jitter_ms"] = a.jitter_ms
    if getattr(a, "calendar", None):
        cmd["calendar"] = a.calendar
        cmd["calendar_policy"] = "DEFER" if a.defer_excluded else "SKIP"

    command_codec = codecs(a.schema_registry_url)[0]
    value = command_codec.encode(cmd, a.commands_topic)
    producer = Producer({"bootstrap.servers": a.brokers, **PRODUCER_CONFIG})
    sent = []
    # With OpenTelemetry, inject the current span instead:
    #   carrier = {}; opentelemetry.propagate.inject(carrier); headers = list(carrier.items())
    headers = [("traceparent", a.traceparent)] if a.traceparent else []
    producer.produce(a.commands_topic, key=a.timer_id.encode(), value=value, headers=headers,
                     on_delivery=lambda err, msg: sent.append((err, msg)))
    producer.flush(30)
    err, msg = sent[0] if sent else ("not delivered within 30 s", None)
    if err:
        raise SystemExit(f"failed: {err}")
    encoding = (f"confluent schema-id={int.from_bytes(value[1:5], 'big')}" if value[0] == 0
                else "single-object")
    print(f"sent {cmd['kind']} timer={a.timer_id} request={cmd['request_id']} "
          f"-> {msg.topic()}[{msg.partition()}]@{msg.offset()} ({encoding})")


if __name__ == "__main__":
    main()
