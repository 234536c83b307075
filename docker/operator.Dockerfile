# syntax=docker/dockerfile:1
# screenlimit-operator: built from the workspace root, run on distroless as non-root.
#   docker build -f docker/operator.Dockerfile -t ghcr.io/screenlimit/operator:0.1.0 .
FROM rust:1.95-slim-bookworm AS build
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p screenlimit-operator --bin screenlimit-operator \
 && cp target/release/screenlimit-operator /screenlimit-operator

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /screenlimit-operator /usr/local/bin/screenlimit-operator
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/screenlimit-operator"]
