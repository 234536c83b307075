# syntax=docker/dockerfile:1
# screenlimit-operator: built from the workspace root, run on distroless as non-root.
#   docker build -f docker/operator.Dockerfile -t ghcr.io/screenlimit/operator:0.2.0 .
# Without a Docker engine: scripts/build-images.sh builds the same image with buildah.
FROM rust:1.95-slim-bookworm AS build
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p screenlimit-operator --bin screenlimit-operator \
 && cp target/release/screenlimit-operator /screenlimit-operator

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /screenlimit-operator /usr/local/bin/screenlimit-operator
LABEL org.opencontainers.image.title="screenlimit operator: the StreamLimiter controller" \
      org.opencontainers.image.source="https://github.com/screenlimit/screenlimit" \
      org.opencontainers.image.licenses="Apache-2.0"
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/screenlimit-operator"]
