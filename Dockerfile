# Static outboxd binary on distroless, running as non-root.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/outboxd ./cmd/outboxd \
 && mkdir -p /out/state

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/outboxd /usr/local/bin/outboxd
# The offsets volume must be writable by the nonroot user (uid 65532).
COPY --from=build --chown=65532:65532 /out/state /var/lib/outboxd
USER nonroot:nonroot
VOLUME /var/lib/outboxd
EXPOSE 9464
ENTRYPOINT ["/usr/local/bin/outboxd"]
