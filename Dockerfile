# syntax=docker/dockerfile:1
# Base images are pinned to exact versions (golang 1.26.8 = go.mod's
# toolchain; Debian 12.11): a rebuild never picks up another base silently.
# Pin the digests as well where your registry policy asks for it (`docker
# buildx imagetools inspect golang:1.26.8-bookworm`), and let Renovate or
# Dependabot propose the updates; app/compose_test.go refuses a
# floating tag.
FROM golang:1.26.8-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -o /stampede ./cmd/stampede

FROM debian:12.11-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates tzdata \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --user-group --no-create-home --shell /usr/sbin/nologin stampede
COPY --from=build /stampede /usr/local/bin/stampede
# The built Vue client (committed in client/dist), served by the gateways.
COPY --from=build /src/client/dist /srv/stampede/client
# Not root: the binary needs no privilege (its ports are above 1024).
USER 10001:10001
# Listen addresses: none is set here, so the binary keeps its loopback
# defaults (gateway 127.0.0.1:8080, push 127.0.0.1:8081, metrics
# 127.0.0.1:9091) and a container reaches nothing outside itself until you
# say otherwise: set STAMPEDE_HTTP_ADDR=0.0.0.0:8080 (and STAMPEDE_PUSH_ADDR,
# STAMPEDE_METRICS_ADDR) for the ports you publish, as docker-compose.yml
# does per service.
EXPOSE 8080 8081 9091
ENTRYPOINT ["stampede"]
# Migrations are a separate step (`stampede migrate`, with a user that may
# change the schema); serve runs with DML rights only.
CMD ["serve"]
