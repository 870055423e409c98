//! Handing records to the producer with back-pressure, and awaiting their delivery.

use super::SinkError;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::future_producer::Delivery;
use rdkafka::producer::{DeliveryFuture, FutureProducer, FutureRecord};
use std::time::Duration;

/// Hands `rec` to `producer`, waiting while its queue is full (back-pressure instead of
/// an error); the returned future resolves when the broker acknowledged the record.
pub async fn enqueue(
    producer: &FutureProducer,
    mut rec: FutureRecord<'_, [u8], [u8]>,
) -> Result<DeliveryFuture, SinkError> {
    loop {
        match producer.send_result(rec) {
            Ok(f) => return Ok(f),
            Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                rec = r;
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            Err((e, _)) => return Err(e.into()),
        }
    }
}

/// Waits for a delivery and flattens its errors.
pub async fn delivered(f: DeliveryFuture) -> Result<Delivery, SinkError> {
    match f.await {
        Ok(Ok(d)) => Ok(d),
        Ok(Err((e, _))) => Err(e.into()),
        Err(_) => Err(SinkError::Canceled),
    }
}
