# syntax=docker/dockerfile:1
# screenlimit-limiter: built from the workspace root, run on distroless as non-root.
#   docker build -f docker/limiter.Dockerfile -t ghcr.io/screenlimit/limiter:0.1.0 .
FROM rust:1.95-slim-bookworm AS build
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p screenlimit-limiter --bin screenlimit-limiter \
 && cp target/release/screenlimit-limiter /screenlimit-limiter

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /screenlimit-limiter /usr/local/bin/screenlimit-limiter
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/screenlimit-limiter"]
