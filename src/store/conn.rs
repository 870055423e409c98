//! The connection to Redis: one server, or a Redis Cluster (the redis crate's
//! cluster-async client, which follows MOVED and ASK and refreshes its slot map after a
//! failover).
//!
//! `--redis-url` names a cluster in any of three ways: several URLs separated by commas
//! (the seed nodes), the scheme `redis+cluster://` (`redis+cluster://h1:p1,h2:p2`), or
//! the URL of any one node of a cluster (`INFO cluster` says `cluster_enabled:1`).
//!
//! Every key of a partition carries the partition's hash tag, so every script call and
//! every pipeline the store sends stays in one slot (the cluster client routes a pipeline
//! by its first key).

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::{ClusterClient, ClusterClientBuilder};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{
    MultipleNodeRoutingInfo, ResponsePolicy, Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr,
};
use redis::{Cmd, IntoConnectionInfo, Pipeline, RedisFuture, RedisResult, Value};
use std::time::Duration;

/// How long a connection attempt to one node may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// How long one call may wait for its reply before it fails (and is retried). Well above
/// any round trip a working link has (a cross-region link, a Redis busy forking): whether
/// Redis is reachable at all is the probe's to say (`--redis-cut-ms`), not a call's.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(5);
/// Retries of one request inside the cluster client (after a node failed, while a
/// replica is promoted); ktimer's own retry helper retries beyond that.
const CLUSTER_RETRIES: u32 = 4;

/// Where Redis is, parsed from `--redis-url`.
#[derive(Debug, Clone, PartialEq)]
pub enum Target {
    /// One server (it may still turn out to be a cluster node: see [`Client::open`]).
    Single(String),
    /// The seed nodes of a Redis Cluster.
    Cluster(Vec<String>),
}

impl Target {
    /// Parses `--redis-url` (see the module documentation).
    pub fn parse(url: &str) -> Target {
        let url = url.trim();
        if let Some(rest) = url.strip_prefix("redis+cluster://") {
            return Target::Cluster(
                rest.split(',')
                    .filter(|s| !s.trim().is_empty())
                    .map(|s| format!("redis://{}", s.trim()))
                    .collect(),
            );
        }
        let urls: Vec<String> = url
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(String::from)
            .collect();
        if urls.len() > 1 {
            Target::Cluster(urls)
        } else {
            Target::Single(url.to_string())
        }
    }
}

/// A Redis client: a single server or a cluster. Cheap to clone.
#[derive(Clone)]
pub enum Client {
    /// One server.
    Single(redis::Client),
    /// A Redis Cluster.
    Cluster(Box<ClusterClient>),
}

impl Client {
    /// Opens `url`; a single URL whose server reports `cluster_enabled:1` becomes a
    /// cluster client seeded with that node.
    pub async fn open(url: &str) -> RedisResult<Client> {
        match Target::parse(url) {
            Target::Cluster(seeds) => Ok(Client::Cluster(Box::new(cluster(&seeds)?))),
            Target::Single(url) => {
                let info = url.as_str().into_connection_info()?;
                let client = redis::Client::open(info.set_tcp_settings(tcp()))?;
                let config = redis::AsyncConnectionConfig::new()
                    .set_connection_timeout(Some(CONNECT_TIMEOUT))
                    .set_response_timeout(Some(RESPONSE_TIMEOUT));
                let mut c = client
                    .get_multiplexed_async_connection_with_config(&config)
                    .await?;
                // A server that refuses INFO (ACLs, renamed commands) is taken as a single one.
                let info: String = redis::cmd("INFO")
                    .arg("cluster")
                    .query_async(&mut c)
                    .await
                    .unwrap_or_default();
                if info.contains("cluster_enabled:1") {
                    Ok(Client::Cluster(Box::new(cluster(&[url])?)))
                } else {
                    Ok(Client::Single(client))
                }
            }
        }
    }

    /// Whether this is a Redis Cluster.
    pub fn is_cluster(&self) -> bool {
        matches!(self, Client::Cluster(_))
    }

    /// A new multiplexed connection that reconnects by itself.
    pub async fn connect(&self) -> RedisResult<Conn> {
        Ok(match self {
            Client::Single(c) => {
                let config = ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(CONNECT_TIMEOUT))
                    .set_response_timeout(Some(RESPONSE_TIMEOUT));
                Conn::Single(ConnectionManager::new_with_config(c.clone(), config).await?)
            }
            Client::Cluster(c) => Conn::Cluster(c.get_async_connection().await?),
        })
    }

    /// A blocking connection whose calls give up after `timeout` (for librdkafka's
    /// rebalance callback, which cannot await).
    pub fn blocking(&self, timeout: Duration) -> RedisResult<Box<dyn redis::ConnectionLike>> {
        Ok(match self {
            Client::Single(c) => {
                let conn = c.get_connection_with_timeout(timeout)?;
                conn.set_read_timeout(Some(timeout))?;
                Box::new(conn)
            }
            Client::Cluster(c) => {
                let conn = c.get_connection()?;
                conn.set_read_timeout(Some(timeout))?;
                Box::new(conn)
            }
        })
    }
}

/// The cluster client of `seeds`, with short connection timeouts and few internal retries.
fn cluster(seeds: &[String]) -> RedisResult<ClusterClient> {
    ClusterClientBuilder::new(seeds.to_vec())
        .tcp_settings(tcp())
        .connection_timeout(CONNECT_TIMEOUT)
        .response_timeout(RESPONSE_TIMEOUT)
        .retries(CLUSTER_RETRIES)
        .min_retry_wait(50)
        .max_retry_wait(1_000)
        .build()
}

/// The TCP settings of every connection: `TCP_NODELAY`, so that a request written while
/// an earlier one is unanswered on the multiplexed connection leaves at once instead of
/// waiting a round trip for the earlier one's ACK (Nagle's algorithm; the redis crate
/// leaves it on by default), which a distant Redis would feel on every call.
fn tcp() -> redis::io::tcp::TcpSettings {
    redis::io::tcp::TcpSettings::default().set_nodelay(true)
}

/// A multiplexed connection to a single server or a cluster. Cheap to clone.
#[derive(Clone)]
pub enum Conn {
    /// One server.
    Single(ConnectionManager),
    /// A Redis Cluster: commands and pipelines are routed by their first key.
    Cluster(ClusterConnection),
}

impl Conn {
    /// Runs `cmd` on every primary (script loading, flushing); answers the first reply.
    pub async fn on_primaries(&mut self, cmd: &Cmd) -> RedisResult<Value> {
        match self {
            Conn::Single(c) => cmd.query_async(c).await,
            Conn::Cluster(c) => {
                let all = MultipleNodeRoutingInfo::AllMasters;
                let route = RoutingInfo::MultiNode((all, Some(ResponsePolicy::AllSucceeded)));
                c.route_command(cmd.clone(), route).await
            }
        }
    }

    /// Runs `cmd` on every primary; answers each primary's reply with its address
    /// (`host:port`; a single server is named `redis`).
    pub async fn per_primary(&mut self, cmd: &Cmd) -> RedisResult<Vec<(String, Value)>> {
        match self {
            Conn::Single(c) => Ok(vec![("redis".to_string(), cmd.query_async(c).await?)]),
            Conn::Cluster(c) => {
                let all = MultipleNodeRoutingInfo::AllMasters;
                let route = RoutingInfo::MultiNode((all, Some(ResponsePolicy::Special)));
                let reply = c.route_command(cmd.clone(), route).await?;
                let pairs: Vec<(String, Value)> = redis::from_redis_value(reply)?;
                Ok(pairs)
            }
        }
    }

    /// Runs `cmd` on the node at `address` (as [`Conn::per_primary`] names it).
    pub async fn on_address(&mut self, address: &str, cmd: &Cmd) -> RedisResult<Value> {
        match (self, address.rsplit_once(':')) {
            (Conn::Cluster(c), Some((host, port))) => {
                let node = SingleNodeRoutingInfo::ByAddress {
                    host: host.to_string(),
                    port: port.parse().unwrap_or(6379),
                };
                c.route_command(cmd.clone(), RoutingInfo::SingleNode(node))
                    .await
            }
            (Conn::Cluster(c), None) => cmd.query_async(c).await,
            (Conn::Single(c), _) => cmd.query_async(c).await,
        }
    }

    /// Runs `cmd` (a keyless command such as SCAN) on the primary that holds `key`.
    pub async fn on_node_of(&mut self, key: &str, cmd: &Cmd) -> RedisResult<Value> {
        match self {
            Conn::Single(c) => cmd.query_async(c).await,
            Conn::Cluster(c) => {
                let route = Route::with_key(key, SlotAddr::Master);
                let node = SingleNodeRoutingInfo::SpecificNode(route);
                c.route_command(cmd.clone(), RoutingInfo::SingleNode(node))
                    .await
            }
        }
    }
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(c) => c.req_packed_commands(pipeline, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
        }
    }
}

impl super::Store {
    /// Reads Redis's clock (`TIME`) on the shared connection: `Ok(Some(µs))`, or
    /// `Ok(None)` for an error reply (Redis is reachable: loading, full...); `Err` for a
    /// connection error or a timeout.
    pub async fn time(&self) -> RedisResult<Option<i64>> {
        let reply: RedisResult<(i64, i64)> =
            redis::cmd("TIME").query_async(&mut self.conn.clone()).await;
        match reply {
            Ok((s, us)) => Ok(Some(s * 1_000_000 + us)),
            Err(e)
                if e.is_io_error()
                    || e.is_timeout()
                    || e.is_connection_dropped()
                    || e.is_connection_refusal() =>
            {
                Err(e)
            }
            Err(_) => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Target;

    #[test]
    fn a_url_list_or_the_cluster_scheme_names_a_cluster() {
        assert_eq!(
            Target::parse("redis://127.0.0.1:6379"),
            Target::Single("redis://127.0.0.1:6379".into())
        );
        assert_eq!(
            Target::parse("redis://a:1, redis://b:2"),
            Target::Cluster(vec!["redis://a:1".into(), "redis://b:2".into()])
        );
        assert_eq!(
            Target::parse("redis+cluster://a:1,b:2"),
            Target::Cluster(vec!["redis://a:1".into(), "redis://b:2".into()])
        );
    }
}
