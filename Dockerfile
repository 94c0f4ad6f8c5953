# paramserv in a container: one static binary, nothing else.
#
# For users, a multi-stage build from source (the last stage is the default):
#
#   docker build -t paramserv .
#   docker run --rm paramserv train --help
#
# From a binary built outside (no Go toolchain image needed; the tests check
# this stage, since they cannot pull a base image):
#
#   CGO_ENABLED=0 go build -trimpath -o paramserv ./cmd/paramserv
#   docker build --target=prebuilt -t paramserv .
#
# The image runs as user 65532 with ENTRYPOINT /paramserv, so a pod's args
# start with the command: ["train", "--model=mnist", ...]. It has no shell,
# no /tmp and no home directory: give --data_dir and --checkpoint_dir on
# volumes (see docs/DEPLOY.md).

ARG GO_VERSION=1.26

FROM golang:${GO_VERSION}-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/paramserv ./cmd/paramserv \
 && /out/paramserv --help >/dev/null

# A binary built outside, copied into an empty image.
FROM scratch AS prebuilt
COPY paramserv /paramserv
USER 65532:65532
EXPOSE 2222
ENTRYPOINT ["/paramserv"]

# The default: the binary from the build stage, with CA certificates for
# `paramserv data fetch`.
FROM scratch AS image
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=build /out/paramserv /paramserv
USER 65532:65532
EXPOSE 2222
ENTRYPOINT ["/paramserv"]
