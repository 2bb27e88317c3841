# syntax=docker/dockerfile:1
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -o /stampede ./cmd/stampede

FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates tzdata \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /stampede /usr/local/bin/stampede
# The built Vue client (committed in client/dist), served by the gateways.
COPY --from=build /src/client/dist /srv/stampede/client
EXPOSE 8080
ENV STAMPEDE_HTTP_ADDR=0.0.0.0:8080
ENTRYPOINT ["stampede"]
CMD ["serve", "--migrate"]
