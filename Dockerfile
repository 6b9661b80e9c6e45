# zketcd image: static binaries on distroless.
#
#   docker build -t zketcd:dev .
#   docker run --rm zketcd:dev serve --zk zk1:2181 --listen-client-urls http://0.0.0.0:2379
#
# /usr/local/bin/zketcd            the server (ENTRYPOINT)
# /usr/local/bin/zketcd-kubeinit   docker-compose.yml's helper: writes kube-apiserver's
#                                  token and service account keys, and is the containers'
#                                  healthcheck (`zketcd-kubeinit probe URL`; no shell here)

# Build stage: the Go toolchain of go.mod's `go` line.
FROM golang:1.26 AS build
WORKDIR /src
ENV CGO_ENABLED=0 GOFLAGS=-trimpath
COPY go.mod go.sum ./
COPY third_party ./third_party
RUN go mod download
COPY . .
ARG VERSION=dev
RUN go build -ldflags "-s -w -X github.com/zketcd/zketcd/internal/buildinfo.version=${VERSION}" -o /out/zketcd ./cmd/zketcd \
 && go build -ldflags "-s -w" -o /out/zketcd-kubeinit ./cmd/zketcd-kubeinit \
 && /out/zketcd version

# Runtime stage: no shell, no libc (the binaries are static), non-root.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/zketcd /out/zketcd-kubeinit /usr/local/bin/
USER nonroot:nonroot
EXPOSE 2379 2381
ENTRYPOINT ["/usr/local/bin/zketcd"]
CMD ["--help"]
