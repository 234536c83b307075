# syntax=docker/dockerfile:1
# screenlimit-admin-ui: built from the workspace root, run on distroless as non-root.
#   docker build -f docker/admin-ui.Dockerfile -t ghcr.io/screenlimit/admin-ui:0.2.0 .
# Without a Docker engine: scripts/build-images.sh builds the same image with buildah.
FROM rust:1.95-slim-bookworm AS build
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p screenlimit-admin-ui --bin screenlimit-admin-ui \
 && cp target/release/screenlimit-admin-ui /screenlimit-admin-ui

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /screenlimit-admin-ui /usr/local/bin/screenlimit-admin-ui
LABEL org.opencontainers.image.title="screenlimit admin-ui: the support dashboard" \
      org.opencontainers.image.source="https://github.com/screenlimit/screenlimit" \
      org.opencontainers.image.licenses="Apache-2.0"
USER 65532:65532
EXPOSE 8081
ENTRYPOINT ["/usr/local/bin/screenlimit-admin-ui"]
