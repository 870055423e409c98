use super::*;

/// A batch of records at (partition, offset); the odd offsets are valid commands.
fn batch(records: &[(i32, i64)], epoch: i64) -> Prepared {
    let mut out = Prepared {
        handled: Vec::new(),
        requests: Vec::new(),
        slots: Vec::new(),
        marks: Vec::new(),
        since: std::time::Instant::now(),
        records: Vec::new(),
    };
    for &(p, off) in records {
        mark(&mut out.marks, p, (epoch, 3), off);
        let m = OwnedMessage::new(
            None,
            None,
            "t".into(),
            rdkafka::Timestamp::NotAvailable,
            p,
            off,
            None,
        );
        if off % 2 == 1 {
            out.slots.push(out.handled.len());
            out.requests.push(ApplyRequest {
                partition: p,
                epoch,
                offset: off,
                timer_id: format!("t{p}-{off}"),
                request_id: String::new(),
                application: String::new(),
                max_pending: None,
                paced: false,
                op: Op::Cancel,
            });
        }
        out.handled.push(unanswered(&m, out.records.len(), 0));
        out.records.push(m);
    }
    out
}

#[test]
fn revising_keeps_the_partitions_still_held_and_their_slots() {
    let mut b = batch(
        &[
            (0, 10),
            (1, 11),
            (0, 13),
            (2, 20),
            (1, 12),
            (2, 21),
            (0, 14),
        ],
        7,
    );
    // 0 still held, applied up to 9 since; 1 sought back; 2 held at a newer epoch.
    b.revise(|p| match p {
        0 => Some((7, 9)),
        2 => Some((8, 30)),
        _ => None,
    });
    let at = |h: &Handled| (h.partition, h.offset);
    assert_eq!(
        b.handled.iter().map(at).collect::<Vec<_>>(),
        [(0, 10), (0, 13), (0, 14)]
    );
    assert_eq!(b.requests.len(), 1);
    assert_eq!(b.requests[0].timer_id, "t0-13");
    assert_eq!(b.slots, [1]);
    assert_eq!(at(&b.handled[b.slots[0]]), (0, 13));
    assert_eq!(b.marks.len(), 1);
    assert_eq!(
        (b.marks[0].partition, b.marks[0].offset, b.marks[0].floor),
        (0, 14, 9)
    );
}

#[test]
fn revising_with_every_partition_held_only_moves_the_floors() {
    let mut b = batch(&[(0, 1), (1, 3), (0, 2)], 7);
    b.revise(|p| Some((7, 100 + i64::from(p))));
    assert_eq!(b.handled.len(), 3);
    assert_eq!(b.slots, [0, 1]);
    let floors: Vec<_> = b.marks.iter().map(|m| (m.partition, m.floor)).collect();
    assert_eq!(floors, [(0, 100), (1, 101)]);
}
