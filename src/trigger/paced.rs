//! Claims that follow the pace: a trigger holds a few seconds' worth of each
//! rate-limited application's fires in memory; the rest of its due backlog stays parked
//! in Redis (`claim.lua`) and is claimed as the held fires go out.
//!
//! Pure: the quotas a claim passes and the rule that asks for the next claim.

use super::budget::Held;
use crate::apps::Applications;
use crate::pace::Rate;

/// A paced application's fires held per trigger: this many seconds of its share of the
/// rate (at least one fire).
pub const AHEAD_S: f64 = 2.0;

/// The most fires of `app` one of `partitions` triggers holds; `None`: not paced.
pub fn cap(apps: &Applications, app: &str, partitions: i32) -> Option<usize> {
    let per_second = apps.of(app).fires_per_second?;
    let share = Rate::share(per_second, partitions, 0.0).per_second;
    Some((share * AHEAD_S).ceil().max(1.0) as usize)
}

/// The quotas of a claim (`claim.lua`): for each paced application, how many more of its
/// fires the trigger may take. With `"*"` paced, its quota is each unnamed
/// application's, and named applications that are not paced get no bound.
pub fn quotas(apps: &Applications, partitions: i32, held: &Held) -> Vec<(String, usize)> {
    let default = cap(apps, "*", partitions);
    let mut out = Vec::new();
    for (name, _) in apps.named().filter(|(n, _)| *n != "*") {
        match cap(apps, name, partitions) {
            Some(c) => out.push((name.to_string(), c.saturating_sub(held.of_app(name)))),
            None if default.is_some() => out.push((name.to_string(), usize::MAX)),
            None => {}
        }
    }
    if let Some(c) = default {
        for (app, n) in held.apps() {
            if out.iter().all(|(a, _)| a != app) {
                out.push((app.to_string(), c.saturating_sub(n)));
            }
        }
        out.push(("*".into(), c));
    }
    out
}

/// Whether a claim should run now for the parked fires (`parked`: application and
/// count, from the last claim): an application no longer paced drains at once; a paced
/// one once half of what it may hold went out.
pub fn refill_due(
    apps: &Applications,
    partitions: i32,
    held: &Held,
    parked: &[(String, u64)],
) -> bool {
    parked.iter().any(|(app, n)| {
        *n > 0 && cap(apps, app, partitions).is_none_or(|c| held.of_app(app) <= c / 2)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::timer::Fire;
    use crate::trigger::budget::Budget;

    fn fire(i: usize, app: &str) -> Fire {
        let mut f = Fire {
            member: format!("1:1:{app}-{i}"),
            timer_id: format!("{app}-{i}"),
            version: 1,
            due_ms: 1,
            def: Default::default(),
            taken: None,
        };
        f.def.application = app.into();
        f
    }

    #[test]
    fn a_paced_application_may_hold_two_seconds_of_its_share() {
        let apps = Applications::parse(
            "[applications.paced]\nfires_per_second = 1000\n[applications.free]\nmax_pending = 5\n",
        )
        .unwrap();
        assert_eq!(cap(&apps, "paced", 1), Some(2_000));
        assert_eq!(cap(&apps, "paced", 4), Some(500));
        assert_eq!(cap(&apps, "free", 1), None);
        let mut held = Held::new(Budget::new(1 << 20, 1 << 30));
        for i in 0..1_500 {
            held.insert(&fire(i, "paced"), true);
        }
        assert_eq!(quotas(&apps, 1, &held), vec![("paced".to_string(), 500)]);
        // 1,500 held of 2,000: not yet; at 1,000 held, claim.
        let parked = [("paced".to_string(), 7)];
        assert!(!refill_due(&apps, 1, &held, &parked));
        let gone: Vec<String> = (0..500).map(|i| format!("1:1:paced-{i}")).collect();
        held.release(gone.iter().map(String::as_str));
        assert!(refill_due(&apps, 1, &held, &parked));
        assert!(!refill_due(&apps, 1, &held, &[("paced".to_string(), 0)]));
        // Parked fires of an application no longer paced drain at once.
        assert!(refill_due(&apps, 1, &held, &[("free".to_string(), 3)]));
    }

    #[test]
    fn a_paced_default_bounds_every_application_but_the_unpaced_named_ones() {
        let apps = Applications::parse(
            "[applications.\"*\"]\nfires_per_second = 10\n[applications.vip]\nmax_pending = 5\n",
        )
        .unwrap();
        let mut held = Held::new(Budget::new(1 << 20, 1 << 30));
        for i in 0..5 {
            held.insert(&fire(i, "anyone"), true);
        }
        let mut q = quotas(&apps, 1, &held);
        q.sort();
        assert_eq!(
            q,
            vec![
                ("*".to_string(), 20),
                ("anyone".to_string(), 15),
                ("vip".to_string(), usize::MAX)
            ]
        );
    }
}
