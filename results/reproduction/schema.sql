CREATE SEQUENCE events_seq INCREMENT BY 1 MINVALUE 1 MAXVALUE 9223372036854775807 START 359 NO CYCLE;
CREATE TABLE events(event_id BIGINT DEFAULT(nextval('events_seq')), run_id VARCHAR NOT NULL, step INTEGER NOT NULL, kind VARCHAR NOT NULL, message VARCHAR NOT NULL, "at" TIMESTAMP NOT NULL);
CREATE TABLE "groups"(run_id VARCHAR NOT NULL, step INTEGER NOT NULL, prompt_index INTEGER NOT NULL, seed BIGINT NOT NULL, reward_mean DOUBLE, reward_variance DOUBLE, reward_std DOUBLE, kept BOOLEAN NOT NULL);
CREATE TABLE metrics(run_id VARCHAR NOT NULL, step INTEGER NOT NULL, "name" VARCHAR NOT NULL, "value" DOUBLE NOT NULL);
CREATE TABLE rollouts(run_id VARCHAR NOT NULL, step INTEGER NOT NULL, prompt_index INTEGER NOT NULL, sample_index INTEGER NOT NULL, turn INTEGER NOT NULL, prompt VARCHAR NOT NULL, reasoning VARCHAR NOT NULL, "action" VARCHAR NOT NULL, reward DOUBLE NOT NULL);
CREATE TABLE runs(run_id VARCHAR PRIMARY KEY, status VARCHAR NOT NULL, config VARCHAR NOT NULL, plugins VARCHAR NOT NULL, git_commit VARCHAR, experiment VARCHAR, cell VARCHAR, seed BIGINT, last_step INTEGER, "error" VARCHAR, created_at TIMESTAMP NOT NULL, updated_at TIMESTAMP NOT NULL, finished_at TIMESTAMP, "name" VARCHAR, tags VARCHAR[] DEFAULT(list_value()), note VARCHAR, pid INTEGER, host VARCHAR, process_started DOUBLE, heartbeat_at TIMESTAMP, environment VARCHAR, config_hash VARCHAR, original_hash VARCHAR);
CREATE TABLE schema_migrations("version" INTEGER NOT NULL, description VARCHAR NOT NULL, applied_at TIMESTAMP NOT NULL);
CREATE TABLE schema_version("version" INTEGER NOT NULL);
CREATE TABLE sweeps(sweep_id VARCHAR NOT NULL, experiment VARCHAR NOT NULL, cells INTEGER NOT NULL, host VARCHAR NOT NULL, pid INTEGER NOT NULL, state VARCHAR NOT NULL, message VARCHAR, started_at TIMESTAMP NOT NULL, finished_at TIMESTAMP);
CREATE TABLE sweep_cells(sweep_id VARCHAR NOT NULL, experiment VARCHAR NOT NULL, cell VARCHAR NOT NULL, seed BIGINT, config_hash VARCHAR NOT NULL, run_id VARCHAR, status VARCHAR NOT NULL, reused BOOLEAN NOT NULL, loaded BOOLEAN, "error" VARCHAR, success DOUBLE, retrieval_acc DOUBLE, entropy DOUBLE, kept_ratio DOUBLE, recorded_at TIMESTAMP NOT NULL);

