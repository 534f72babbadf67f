# syntax=docker/dockerfile:1
#
# The Ankusa image: one static binary on distroless/static, run as a
# non-root user, the store on the /data volume.
#
#   docker build --build-arg VERSION=v1.2.3 --build-arg COMMIT=$(git rev-parse --short=12 HEAD) -t ankusa:v1.2.3 .
#
# The build stage runs `make build`, the same target (and so the same
# `go build` command and -ldflags) as a release built outside Docker:
# test/deploy asserts it, and tests the binary that target produces
# (static, stamped, serving). No Docker engine runs in this repository's
# test suite, so the image itself is not built there.

ARG GO_VERSION=1.26.8

FROM golang:${GO_VERSION}-bookworm AS build
WORKDIR /src
# Modules first: the layer stays cached until go.mod or go.sum change.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
ARG COMMIT=unknown
RUN make build VERSION=${VERSION} COMMIT=${COMMIT} OUT=/out/ankusa
# The runtime image has no shell to mkdir with: the data directory is made
# here and copied with its owner, so the non-root user can write to a fresh
# /data volume (Docker copies the image's directory owner into it).
RUN mkdir -p /out/data

# distroless/static: CA certificates, tzdata, /etc/passwd with "nonroot"
# (65532), no shell, no package manager. The binary needs nothing else
# (CGO_ENABLED=0). No HEALTHCHECK: Kubernetes probes /ready and /health,
# systemd uses sd_notify, and a Docker health check would only fsync a
# probe key on a timer nobody reads.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/ankusa /usr/local/bin/ankusa
COPY --from=build --chown=65532:65532 /out/data /data
# The store lives under node.data_dir; the image points it at the volume.
ENV ANKUSA_DATA_DIR=/data
VOLUME ["/data"]
# 4000: ingest (webhooks, /health, /ready). 4002: operator API and
# /metrics, which binds 127.0.0.1 unless admin.ip says otherwise.
EXPOSE 4000 4002
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/ankusa"]
CMD ["serve"]
