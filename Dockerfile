# Builds the ktimer binary for docker-compose.yml.
FROM rust:1.88-bookworm AS build
RUN apt-get update && apt-get install -y --no-install-recommends cmake libssl-dev pkg-config zlib1g-dev && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cargo build --release --locked --bin ktimer

FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates libssl3 && rm -rf /var/lib/apt/lists/*
COPY --from=build /src/target/release/ktimer /usr/local/bin/ktimer
EXPOSE 9464
ENTRYPOINT []
CMD ["ktimer", "run"]
