# zketcd image: static binaries on a static base image.
#
#   docker build -t zketcd:dev .
#   docker build -t zketcd:dev --build-arg BASE_IMAGE=scratch .
#
# Build arguments:
#   GO_IMAGE         the Go toolchain of the build stage (default golang:1.26,
#                    go.mod's `go` line)
#   BASE_IMAGE       the runtime image; the binaries are static, so any image
#                    works, scratch too (default distroless static, nonroot)
#   VERSION, COMMIT  linked into the binary as make build does
#                    (git describe --tags --always --dirty; git rev-parse HEAD)
# The build downloads the Go modules unless the context holds vendor/ (make
# compose-test builds offline from a vendored copy of the sources).
#
# /usr/local/bin/zketcd            the server (ENTRYPOINT)
# /usr/local/bin/zketcd-kubeinit   docker-compose.yml's helper: writes kube-apiserver's
#                                  token, service account keys and the stack's
#                                  certificates, turns authentication on, and is the
#                                  containers' healthcheck (`zketcd-kubeinit probe URL`;
#                                  no shell here)
# /var/lib/zketcd/loss             where loss files go (the default --rollback-loss-dir):
#                                  mount a volume there
ARG GO_IMAGE=golang:1.26
ARG BASE_IMAGE=gcr.io/distroless/static-debian12:nonroot

FROM ${GO_IMAGE} AS build
WORKDIR /src
ENV CGO_ENABLED=0 GOFLAGS="-trimpath -buildvcs=false"
COPY . .
ARG VERSION=dev
ARG COMMIT=
RUN go build -ldflags "-s -w -X github.com/zketcd/zketcd/internal/buildinfo.version=${VERSION} -X github.com/zketcd/zketcd/internal/buildinfo.commit=${COMMIT}" \
      -o /out/zketcd ./cmd/zketcd \
 && go build -ldflags "-s -w" -o /out/zketcd-kubeinit ./cmd/zketcd-kubeinit \
 && mkdir -p /out/loss \
 && /out/zketcd version

# Runtime stage: no shell, no libc (the binaries are static), non-root.
FROM ${BASE_IMAGE}
COPY --from=build /out/zketcd /out/zketcd-kubeinit /usr/local/bin/
COPY --from=build --chown=65532:65532 /out/loss /var/lib/zketcd/loss
USER 65532:65532
EXPOSE 2379 2381
ENTRYPOINT ["/usr/local/bin/zketcd"]
CMD ["--help"]
