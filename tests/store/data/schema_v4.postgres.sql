-- llamaherd store schema version 4 (PostgreSQL), frozen for the migration test.
-- Version 5 added flow control (work_items and runs columns, flow_limits,
-- flow_messages) and the spend ledger.
BEGIN;
CREATE TABLE "agent_events" ("id" BIGSERIAL NOT NULL PRIMARY KEY, "agent" TEXT NOT NULL, "at" DOUBLE PRECISION NOT NULL, "type" TEXT NOT NULL, "data" TEXT);
CREATE INDEX "agent_events_at" ON "agent_events" ("at");
CREATE INDEX "agent_events_agent_id" ON "agent_events" ("agent", "id");
CREATE TABLE "agent_states" ("agent" TEXT NOT NULL PRIMARY KEY, "state" TEXT NOT NULL, "cause" TEXT, "updated_at" DOUBLE PRECISION NOT NULL);
CREATE TABLE "calls" ("id" SERIAL NOT NULL PRIMARY KEY, "caller_run" TEXT NOT NULL, "target" TEXT NOT NULL, "context" TEXT NOT NULL, "depth" INTEGER NOT NULL, "state" TEXT NOT NULL, "return_value" TEXT, "error" TEXT, "run_id" TEXT, "created_at" DOUBLE PRECISION NOT NULL, "finished_at" DOUBLE PRECISION);
CREATE INDEX "calls_caller_run" ON "calls" ("caller_run");
CREATE TABLE "hosts" ("name" TEXT NOT NULL PRIMARY KEY, "info" TEXT NOT NULL, "heartbeat_at" DOUBLE PRECISION NOT NULL);
CREATE TABLE "lock_waits" ("run_id" TEXT NOT NULL PRIMARY KEY, "uri" TEXT NOT NULL, "since" DOUBLE PRECISION NOT NULL);
CREATE TABLE "locks" ("uri" TEXT NOT NULL PRIMARY KEY, "run_id" TEXT NOT NULL, "acquired_at" DOUBLE PRECISION NOT NULL, "expires_at" DOUBLE PRECISION NOT NULL);
CREATE INDEX "locks_run_id" ON "locks" ("run_id");
CREATE INDEX "locks_expires_at" ON "locks" ("expires_at");
CREATE TABLE "meta" ("key" TEXT NOT NULL PRIMARY KEY, "value" TEXT NOT NULL);
CREATE TABLE "paused" ("name" TEXT NOT NULL PRIMARY KEY, "at" DOUBLE PRECISION NOT NULL);
CREATE TABLE "run_events" ("id" BIGSERIAL NOT NULL PRIMARY KEY, "run_id" TEXT NOT NULL, "at" DOUBLE PRECISION NOT NULL, "type" TEXT NOT NULL, "data" TEXT);
CREATE INDEX "run_events_run_id_id" ON "run_events" ("run_id", "id");
CREATE TABLE "runs" ("id" TEXT NOT NULL PRIMARY KEY, "agent" TEXT NOT NULL, "state" TEXT NOT NULL, "trigger_kind" TEXT NOT NULL, "item_id" INTEGER, "host" TEXT, "created_at" DOUBLE PRECISION NOT NULL, "started_at" DOUBLE PRECISION, "finished_at" DOUBLE PRECISION, "exit_code" INTEGER, "reason" TEXT, "status" TEXT, "return_value" TEXT, "call_depth" INTEGER NOT NULL, "caller_run" TEXT, "call_id" INTEGER, "rerun_count" INTEGER NOT NULL, "rerun_requested" BOOLEAN NOT NULL, "sandbox" TEXT, "transcript" TEXT, "wait_filter" TEXT, "wait_deadline" DOUBLE PRECISION, "deadline" DOUBLE PRECISION, "input_tokens" INTEGER NOT NULL, "output_tokens" INTEGER NOT NULL, "token_hash" TEXT, "trigger" TEXT NOT NULL);
CREATE INDEX "runs_state_agent" ON "runs" ("state", "agent");
CREATE INDEX "runs_agent_created_at" ON "runs" ("agent", "created_at");
CREATE TABLE "status_messages" ("id" SERIAL NOT NULL PRIMARY KEY, "run_id" TEXT NOT NULL, "at" DOUBLE PRECISION NOT NULL, "text" TEXT NOT NULL);
CREATE INDEX "status_messages_run_id" ON "status_messages" ("run_id");
CREATE TABLE "trigger_ticks" ("id" SERIAL NOT NULL PRIMARY KEY, "key" TEXT NOT NULL, "tick" DOUBLE PRECISION NOT NULL, "claimed_at" DOUBLE PRECISION NOT NULL);
CREATE UNIQUE INDEX "trigger_ticks_key_tick" ON "trigger_ticks" ("key", "tick");
CREATE TABLE "work_items" ("id" SERIAL NOT NULL PRIMARY KEY, "agent" TEXT NOT NULL, "kind" TEXT NOT NULL, "payload" TEXT NOT NULL, "prompt" TEXT NOT NULL, "source" TEXT, "run_id" TEXT, "call_id" INTEGER, "recovery" TEXT, "rerun_count" INTEGER NOT NULL, "created_at" DOUBLE PRECISION NOT NULL, "dedupe_key" TEXT, "state" TEXT NOT NULL);
CREATE INDEX "work_items_agent_id" ON "work_items" ("agent", "id") WHERE ("state" = 'queued');
CREATE UNIQUE INDEX "work_items_dedupe_key" ON "work_items" ("dedupe_key") WHERE ("dedupe_key" IS NOT NULL);
CREATE INDEX "work_items_run_id" ON "work_items" ("run_id") WHERE ("run_id" IS NOT NULL);
INSERT INTO meta (key, value) VALUES ('schema_version', '4');
COMMIT;
