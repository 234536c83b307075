# syntax=docker/dockerfile:1
# screenlimit-limiter: built from the workspace root, run on distroless as non-root. It carries the
# Redis module too (/usr/lib/screenlimit/), which the operator's Redis pods copy and load.
#   docker build -f docker/limiter.Dockerfile -t ghcr.io/screenlimit/limiter:0.2.0 .
# Without a Docker engine: scripts/build-images.sh builds the same image with buildah.
FROM rust:1.95-slim-bookworm AS build
# The module's bindgen step needs libclang.
RUN apt-get update && apt-get install -y --no-install-recommends clang libclang-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p screenlimit-limiter --bin screenlimit-limiter \
      -p screenlimit-redis-module --lib \
 && cp target/release/screenlimit-limiter /screenlimit-limiter \
 && cp target/release/libscreenlimit_redis_module.so /screenlimit_redis_module.so

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /screenlimit-limiter /usr/local/bin/screenlimit-limiter
COPY --from=build /screenlimit_redis_module.so /usr/lib/screenlimit/screenlimit_redis_module.so
LABEL org.opencontainers.image.title="screenlimit limiter: the concurrent-stream API" \
      org.opencontainers.image.source="https://github.com/screenlimit/screenlimit" \
      org.opencontainers.image.licenses="Apache-2.0"
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/screenlimit-limiter"]
