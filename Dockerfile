# cle's image for Docker-compatible builders. `make image` builds the same
# layout without a container runtime (hack/image.sh); both hold static
# cle-controller (the entrypoint), kubectl-cle and candidate (examples/candidate,
# run by manifests/examples), run as 65532:65532.
#   docker build --build-arg VERSION=$(git describe --tags --always) -t cle .
FROM golang:1.26 AS build
ARG VERSION=dev
ARG TARGETARCH=amd64
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 GOOS=linux GOARCH=${TARGETARCH} go build -trimpath \
      -ldflags "-s -w -X github.com/cle-dev/cle/internal/version.version=${VERSION}" \
      -o /out/ ./cmd/cle-controller ./cmd/kubectl-cle ./examples/candidate

FROM gcr.io/distroless/static:nonroot
ARG VERSION=dev
LABEL org.opencontainers.image.title="cle" \
      org.opencontainers.image.description="cle-controller (the entrypoint), kubectl-cle and the example candidate: coordinated leader election for Kubernetes" \
      org.opencontainers.image.source="https://github.com/cle-dev/cle" \
      org.opencontainers.image.version="${VERSION}"
COPY --from=build /out/cle-controller /out/kubectl-cle /out/candidate /
COPY LICENSE /LICENSE
USER 65532:65532
ENTRYPOINT ["/cle-controller"]
