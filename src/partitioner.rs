//! The partitioner that decides a timer's partition, named once for producers and the
//! intake alike. Java clients and Kafka Streams hash keys with murmur2; librdkafka-based
//! clients (Python, Go, Rust) default to CRC32. A timer created from one kind and
//! cancelled from the other would otherwise live in one partition while its cancel lands
//! in another; the intake forwards (or rejects) a command that arrived in a partition its
//! key does not map to under this partitioner.

/// How a record key maps to a partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Partitioner {
    /// `toPositive(murmur2(key)) % n`: Java's and Kafka Streams' default
    /// (librdkafka `partitioner=murmur2_random`).
    #[default]
    Murmur2,
    /// `crc32(key) % n`: librdkafka's default (`partitioner=consistent_random`).
    Crc32,
}

impl Partitioner {
    /// The partition of `key` among `n` partitions.
    pub fn partition(self, key: &[u8], n: i32) -> i32 {
        let n = n.max(1) as u32;
        let p = match self {
            Partitioner::Murmur2 => (murmur2::murmur2(key, murmur2::KAFKA_SEED) & 0x7fff_ffff) % n,
            Partitioner::Crc32 => crc32fast::hash(key) % n,
        };
        p as i32
    }

    /// librdkafka's name of the same partitioner (its `partitioner` property).
    pub fn librdkafka(self) -> &'static str {
        match self {
            Partitioner::Murmur2 => "murmur2_random",
            Partitioner::Crc32 => "consistent_random",
        }
    }

    /// How to tell a producer to use it.
    pub fn advice(self) -> &'static str {
        match self {
            Partitioner::Murmur2 => {
                "murmur2 (Java's default; librdkafka: partitioner=murmur2_random)"
            }
            Partitioner::Crc32 => "crc32 (librdkafka's default partitioner=consistent_random)",
        }
    }
}

/// What the intake does with a command that arrived in another partition than its key's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Misrouted {
    /// Produce it again to the key's partition, where it is applied and answered.
    #[default]
    Forward,
    /// Answer it REJECTED with a reason naming the partitioner to use.
    Reject,
}

#[cfg(test)]
mod tests {
    use super::Partitioner;

    #[test]
    fn murmur2_matches_kafkas_java_client() {
        // Kafka's UtilsTest.testMurmur2: the signed hashes of these keys.
        for (key, hash) in [
            (&b"21"[..], -973_932_308i32),
            (b"foobar", -790_332_482),
            (b"a-little-bit-long-string", -985_981_536),
            (b"a-little-bit-longer-string", -1_486_304_829),
            (
                b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8",
                -58_897_971,
            ),
            (b"abc", 479_470_107),
        ] {
            let n = i32::MAX;
            let want = (hash & 0x7fff_ffff) % n;
            assert_eq!(Partitioner::Murmur2.partition(key, n), want, "{key:?}");
        }
        assert_eq!(
            Partitioner::Crc32.partition(b"123456789", 1 << 30),
            (0xCBF4_3926u32 % (1 << 30)) as i32
        );
    }
}
