//! When the trigger claims next and when it looks again (pure).

/// When to claim next after a claim at `now_ms` that took everything due within
/// `ahead_ms` (all of it unless `full`): `ahead_ms` before the next fire is due, but not
/// sooner than half of `ahead_ms` from now, so a steady stream of fires is claimed in
/// batches of half the window, each at least half the window ahead of its due time
/// (the next fire is due after `now_ms + ahead_ms`), not one claim per millisecond.
/// A full batch claims again at once; nothing left, never (until woken).
pub(super) fn next_claim(now_ms: i64, ahead_ms: i64, next_due: Option<i64>, full: bool) -> i64 {
    match next_due {
        _ if full => now_ms,
        Some(d) => (d - ahead_ms).max(now_ms + ahead_ms / 2),
        None => i64::MAX,
    }
}

/// Acknowledgements waiting that make a call go at once, whatever their age (a claim's
/// worth: a burst acknowledges as fast as Redis answers).
pub(super) const ACK_FULL: usize = 1_000;

/// When the `n` acknowledgements waiting since `since_ms` go to Redis: `every_ms` after
/// the first (so a steady stream is acknowledged in batches, not one call per answer
/// of the broker), at once when [`ACK_FULL`] wait, never when none do.
pub(super) fn ack_at(since_ms: i64, n: usize, every_ms: i64) -> i64 {
    match n {
        0 => i64::MAX,
        n if n >= ACK_FULL => since_ms,
        _ => since_ms.saturating_add(every_ms),
    }
}

/// How soon a send must be due for the broker's answers to wait for it, ms.
pub(super) const ANSWERS_RIDE_MS: i64 = 2;

/// Whether the broker's answer to a fire wakes the trigger waiting at `now_ms` with its
/// next send due at `send_at`: not when that send is due within [`ANSWERS_RIDE_MS`] (the
/// step that sends it takes the answers too), so a steady stream wakes the task once per
/// due ms, not also once per answer.
pub(super) fn answers_wake(now_ms: i64, send_at: Option<i64>) -> bool {
    send_at.is_none_or(|at| at > now_ms.saturating_add(ANSWERS_RIDE_MS))
}

/// When the trigger must look again: the planned claim, the next send, the
/// acknowledgements' time ([`ack_at`]), or `max_idle_ms` from now, whichever comes first.
pub(super) fn wake_at(
    now_ms: i64,
    claim_at: i64,
    send_at: Option<i64>,
    max_idle_ms: i64,
    ack_at: i64,
) -> i64 {
    let idle = now_ms.saturating_add(max_idle_ms);
    claim_at
        .min(send_at.unwrap_or(i64::MAX))
        .min(idle)
        .min(ack_at)
}

#[cfg(test)]
mod tests {
    use super::{ack_at, answers_wake, next_claim, wake_at, ACK_FULL, ANSWERS_RIDE_MS};

    #[test]
    fn a_steady_stream_is_claimed_half_a_window_at_a_time() {
        // Claimed up to 1,100 at 1,000; the next fire is due at 1,101.
        assert_eq!(next_claim(1_000, 100, Some(1_101), false), 1_050);
        for d in 1_101..1_500 {
            let at = next_claim(1_000, 100, Some(d), false);
            assert!(
                d - at >= 50,
                "due {d} claimed at {at}: less than half the window ahead"
            );
            assert!(
                at >= 1_050,
                "due {d} claimed at {at}: sooner than half the window"
            );
        }
        assert_eq!(next_claim(1_000, 100, Some(5_000), false), 4_900);
        assert_eq!(next_claim(1_000, 100, Some(1_101), true), 1_000);
        assert_eq!(next_claim(1_000, 100, None, false), i64::MAX);
    }

    #[test]
    fn the_trigger_looks_again_at_the_first_thing_due() {
        let none = i64::MAX;
        assert_eq!(wake_at(1_000, 1_500, Some(1_200), 5_000, none), 1_200);
        assert_eq!(wake_at(1_000, 1_100, Some(1_200), 5_000, none), 1_100);
        assert_eq!(
            wake_at(1_000, i64::MAX, None, 5_000, none),
            6_000,
            "idle safety net"
        );
        assert_eq!(
            wake_at(1_000, 1_500, Some(1_200), 5_000, 1_010),
            1_010,
            "acks first"
        );
    }

    #[test]
    fn answers_ride_on_a_send_due_soon_and_wake_the_trigger_otherwise() {
        assert!(answers_wake(1_000, None), "nothing to send: at once");
        assert!(answers_wake(1_000, Some(1_000 + ANSWERS_RIDE_MS + 1)));
        assert!(!answers_wake(1_000, Some(1_000 + ANSWERS_RIDE_MS)));
        assert!(!answers_wake(1_000, Some(900)), "a send overdue: next step");
    }

    #[test]
    fn acknowledgements_wait_for_company_unless_a_claims_worth_waits() {
        assert_eq!(ack_at(1_000, 0, 10), i64::MAX, "nothing to acknowledge");
        assert_eq!(ack_at(1_000, 1, 10), 1_010);
        assert_eq!(ack_at(1_000, ACK_FULL - 1, 10), 1_010);
        assert_eq!(
            ack_at(1_000, ACK_FULL, 10),
            1_000,
            "a full batch goes at once"
        );
        assert_eq!(ack_at(1_000, 5, 0), 1_000, "0: every answer at once");
    }
}
