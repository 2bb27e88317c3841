-- +goose Up
-- Identity-provider subjects (issue 26): a token of Keycloak, Auth0, Okta,
-- Cognito or Entra ID names its user by (iss, sub), sub being any string (a
-- UUID, "auth0|65f1…"). Each pair gets one row here on first sight; its
-- Stampede user id is seq + 999,999,999,999,999 (order.FirstMappedUserID is
-- the id of seq 1), so mapped ids never meet the ids that HS256 tokens carry
-- directly (1 … 999,999,999,999,999). The unique key makes two gateways that
-- see a new subject at the same instant agree on one row (INSERT … ON
-- DUPLICATE KEY UPDATE seq = LAST_INSERT_ID(seq)). VARBINARY compares bytes
-- exactly: no collation folds case or pads trailing spaces, so "alice" and
-- "alice " are two subjects, as the provider meant. idx_identity_subject
-- serves the support search by subject alone. Runs on MariaDB 10.11 and
-- MySQL 8.
CREATE TABLE user_identity (
  seq        BIGINT         NOT NULL AUTO_INCREMENT,
  issuer     VARBINARY(255) NOT NULL,
  subject    VARBINARY(255) NOT NULL,
  created_at DATETIME(3)    NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  PRIMARY KEY (seq),
  UNIQUE KEY uk_identity (issuer, subject),
  KEY idx_identity_subject (subject)
) ENGINE=InnoDB;

-- +goose Down
DROP TABLE user_identity;
