-- +goose Up
-- Issue 27, deployment identity. Runs on MariaDB 10.11 and MySQL 8.
--
-- deployment: the one row naming this database's deployment (a random UUID
-- that persistence.Migrate writes once, right after the migrations, with
-- INSERT IGNORE: it never changes afterwards, and a MySQL backup restored
-- keeps it). Every role compares it with the identity its Redis DB carries
-- (lua.ClaimDeployment) and refuses to start on a Redis DB of another
-- deployment. singleton is 1 in the only row the CHECK allows.
CREATE TABLE deployment (
  singleton  TINYINT     NOT NULL DEFAULT 1,
  id         CHAR(36)    NOT NULL,
  created_at DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  PRIMARY KEY (singleton),
  CONSTRAINT chk_deployment_singleton CHECK (singleton = 1)
) ENGINE=InnoDB DEFAULT CHARSET=ascii COLLATE=ascii_bin;

-- product.incarnation: 32 random hex digits set when the product is created
-- (persistence.Store.CreateProductBy). load.lua stores it in every stock
-- hash of the product and refuses a hash that carries another one, so the
-- Redis stock of an earlier product with the same id (another database, a
-- MySQL restored from a backup) is never adopted. '' = a product created
-- before this migration: its hashes carry none.
ALTER TABLE product
  ADD COLUMN incarnation CHAR(32) NOT NULL DEFAULT '' AFTER shards;

-- +goose Down
ALTER TABLE product DROP COLUMN incarnation;
DROP TABLE deployment;
