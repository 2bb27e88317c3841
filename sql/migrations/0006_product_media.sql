-- +goose Up
-- A product's picture and text for the storefront (issue 15), set by an admin
-- on creation: image_url an absolute http(s) URL (at most 2048 bytes, checked
-- by the gateway), description plain text of at most 2000 characters. Empty
-- means none. Runs on MariaDB 10.11 and MySQL 8.
ALTER TABLE product
  ADD COLUMN image_url   VARCHAR(2048) NOT NULL DEFAULT '' AFTER name,
  ADD COLUMN description VARCHAR(2000) NOT NULL DEFAULT '' AFTER image_url;

-- +goose Down
ALTER TABLE product
  DROP COLUMN description,
  DROP COLUMN image_url;
