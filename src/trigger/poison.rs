//! Isolating a poisoned acknowledgement: a fire whose acknowledgement makes a store
//! function fail the same way on every try (its timer's record changed behind ktimer's
//! back into bytes no function can read, a bug). Retrying the call would hold every
//! fire acknowledged with it in flight for ever, and with them the trigger's budget:
//! the partition would stop firing. Instead the call is halved, each half acknowledged,
//! until the one acknowledgement that fails is alone; that fire (delivered already) is
//! forgotten ([`Ack::Forget`]) and counted, and the rest is acknowledged.
//!
//! A transient refusal (connection, loading, out of memory, not persisting) is not
//! poison ([`StoreError::is_poison`]): the call fails as before and is retried whole
//! (an acknowledgement is idempotent, so halves acknowledged already change nothing).

use crate::store::{Ack, Store, StoreError};
use std::future::Future;
use std::pin::Pin;

/// What an acknowledgement call did.
pub(super) struct Acked {
    /// Members still in flight that the call removed, or the error (retried whole).
    pub result: Result<i64, StoreError>,
    /// Members whose acknowledgement failed every time: forgotten.
    pub poisoned: Vec<String>,
}

/// Acknowledges `acks` of `partition` at `epoch`, isolating poisoned ones.
pub(super) fn ack<'a>(
    store: &'a Store,
    partition: i32,
    epoch: i64,
    acks: &'a [Ack],
) -> Pin<Box<dyn Future<Output = Acked> + Send + 'a>> {
    Box::pin(async move {
        let error = match store.ack(partition, epoch, acks).await {
            Err(e) if e.is_poison() && !acks.is_empty() => e,
            result => {
                return Acked {
                    result,
                    poisoned: Vec::new(),
                }
            }
        };
        if let [one] = acks {
            let member = one.member().to_string();
            tracing::error!(partition, member, %error,
                "a fire's acknowledgement makes the store fail every time: the fire was delivered; it is forgotten, the partition goes on");
            let forget = [Ack::Forget(member.clone())];
            return match store.ack(partition, epoch, &forget).await {
                Ok(n) => Acked {
                    result: Ok(n),
                    poisoned: vec![member],
                },
                Err(e) => Acked {
                    result: Err(e),
                    poisoned: Vec::new(),
                },
            };
        }
        let (first, second) = acks.split_at(acks.len() / 2);
        let mut a = ack(store, partition, epoch, first).await;
        let Ok(n) = a.result else { return a };
        let b = ack(store, partition, epoch, second).await;
        a.poisoned.extend(b.poisoned);
        Acked {
            result: b.result.map(|m| n + m),
            poisoned: a.poisoned,
        }
    })
}
