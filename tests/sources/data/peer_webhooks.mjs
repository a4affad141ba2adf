// Regenerates peer_webhooks.json: what Action Llama 0.29.1's webhook providers
// (dist/webhooks/providers/*.js) make of each delivery below (the trigger context, or null when
// it drops it) and whether each filter matches. The payloads follow Action Llama's own provider
// tests (test/webhooks/providers/*.test.ts), plus the fallbacks they do not reach.
//   node peer_webhooks.mjs /path/to/@action-llama/action-llama/dist > peer_webhooks.json
const dist = process.argv[2];
const load = async (file, name) => new (await import(`${dist}/webhooks/providers/${file}.js`))[name]();
const providers = {
  github: await load("github", "GitHubWebhookProvider"),
  sentry: await load("sentry", "SentryWebhookProvider"),
  linear: await load("linear", "LinearWebhookProvider"),
  mintlify: await load("mintlify", "MintlifyWebhookProvider"),
  slack: await load("slack", "SlackWebhookProvider"),
  discord: await load("discord", "DiscordWebhookProvider"),
  twitter: await load("twitter", "TwitterWebhookProvider"),
};

const repo = { full_name: "acme/app" };
const long = "x".repeat(5000);
// [source, id, headers, body, filters to evaluate]
const cases = [
  // ---------------------------------------------------------------- github
  ["github", "issues", { "x-github-event": "issues" }, {
    action: "labeled", repository: repo, sender: { login: "user1" },
    issue: { number: 42, title: "Fix the bug", body: "Description here",
      html_url: "https://github.com/acme/app/issues/42", user: { login: "author1" },
      assignee: { login: "dev-bot" }, labels: [{ name: "agent" }, { name: "bug" }] },
  }, [{}, { events: ["issues"] }, { events: ["pull_request"] }, { actions: ["labeled"] },
      { actions: ["opened"] }, { repos: ["acme/app"] }, { repos: ["other/repo"] },
      { orgs: ["acme"] }, { orgs: ["other"] }, { org: "acme" }, { org: "other" },
      { org: "other", orgs: ["acme"] }, { org: "acme", orgs: ["other"] },
      { org: "other", orgs: ["other2"] }, { labels: ["agent"] }, { labels: ["nope", "bug"] },
      { labels: ["nope"] }, { assignee: "dev-bot" }, { assignee: "other" },
      { author: "author1" }, { author: "user1" }, { branches: ["main"] },
      { conclusions: ["success"] }, { events: ["issues"], labels: ["bug"], orgs: ["acme"] }]],
  ["github", "pull_request", { "x-github-event": "pull_request" }, {
    action: "opened", repository: repo, sender: { login: "user1" },
    pull_request: { number: 10, title: "Add feature", body: "PR body",
      html_url: "https://github.com/acme/app/pull/10", user: { login: "author2" },
      assignee: null, labels: [{ name: "enhancement" }], head: { ref: "feature-branch" },
      base: { ref: "main" } },
  }, [{ branches: ["feature-branch"] }, { branches: ["main"] }, { author: "author2" }]],
  ["github", "issue_comment", { "x-github-event": "issue_comment" }, {
    action: "created", repository: repo, sender: { login: "user1" },
    issue: { number: 5, title: "Help needed", user: { login: "author3" }, labels: [],
      html_url: "https://github.com/acme/app/issues/5" },
    comment: { body: "Here is my comment", html_url: "https://github.com/acme/app/issues/5#comment-1",
      user: { login: "commenter" } },
  }, [{ branches: ["main"] }, { author: "author3" }, { author: "commenter" },
      { conclusions: ["failure"] }]],
  ["github", "pull_request_review", { "x-github-event": "pull_request_review" }, {
    action: "submitted", repository: repo, sender: { login: "reviewer1" },
    pull_request: { number: 7, title: "Big PR", user: { login: "author4" },
      head: { ref: "big-pr-branch" }, base: { ref: "main" } },
    review: { body: "LGTM", html_url: "https://github.com/acme/app/pull/7#pullrequestreview-1" },
  }, [{ branches: ["big-pr-branch"] }, { branches: ["main"] }]],
  ["github", "push", { "x-github-event": "push" }, {
    ref: "refs/heads/main", repository: repo, sender: { login: "user1" },
    compare: "https://github.com/acme/app/compare/abc...def",
    head_commit: { message: "fix: something", author: { username: "pusher1" } },
    pusher: { name: "pusher1" },
  }, [{ branches: ["main"] }, { branches: ["dev"] }, { author: "pusher1" }]],
  ["github", "push-pusher-fallback", { "x-github-event": "push" }, {
    ref: "refs/heads/release", repository: repo, sender: { login: "user1" },
    compare: "https://github.com/acme/app/compare/a...b",
    head_commit: { message: "chore: bump", author: { name: "Bot" } }, pusher: { name: "deployer" },
  }, [{ author: "deployer" }]],
  ["github", "workflow_run", { "x-github-event": "workflow_run" }, {
    action: "completed", repository: repo, sender: { login: "user1" },
    workflow_run: { name: "CI", html_url: "https://github.com/acme/app/actions/runs/123",
      head_branch: "feature-branch", actor: { login: "actor1" }, conclusion: "success",
      pull_requests: [{ number: 42 }] },
  }, [{ conclusions: ["success"] }, { conclusions: ["failure"] }, { author: "actor1" },
      { branches: ["feature-branch"] }]],
  ["github", "workflow_run-no-pr", { "x-github-event": "workflow_run" }, {
    action: "requested", repository: repo, sender: { login: "user1" },
    workflow_run: { name: "CI", html_url: "https://github.com/acme/app/actions/runs/124",
      head_branch: "main", actor: { login: "actor1" }, conclusion: null, pull_requests: [] },
  }, [{ conclusions: ["success"] }]],
  ["github", "long-body", { "x-github-event": "issues" }, {
    action: "opened", repository: repo, sender: { login: "user1" },
    issue: { number: 1, title: "test", body: long, html_url: "https://github.com/acme/app/issues/1",
      user: { login: "a" }, labels: [] },
  }, []],
  ["github", "star", { "x-github-event": "star" }, {
    action: "created", repository: repo, sender: { login: "starrer" },
  }, [{ actions: ["created"] }]],
  ["github", "create-no-action-no-sender", { "x-github-event": "create" }, {
    ref: "v1.0", ref_type: "tag", repository: { full_name: "other-org/tool" },
  }, [{ orgs: ["other-org"] }, { org: "acme" }, { actions: ["created"] }]],
  ["github", "ping", { "x-github-event": "ping" }, { zen: "test", repository: repo }, []],
  ["github", "no-repository", { "x-github-event": "issues" }, {}, []],
  ["github", "no-repository-name", { "x-github-event": "star" }, { action: "created", repository: {} }, []],
  ["github", "no-event-header", {}, { action: "opened", repository: repo }, []],
  ["github", "issues-no-issue", { "x-github-event": "issues" }, { action: "opened", repository: repo }, []],
  ["github", "issues-null-issue", { "x-github-event": "issues" }, { action: "opened", repository: repo, issue: null }, []],
  ["github", "pull_request-no-pr", { "x-github-event": "pull_request" }, { action: "opened", repository: repo }, []],
  ["github", "issue_comment-no-comment", { "x-github-event": "issue_comment" }, {
    action: "created", repository: repo, issue: { number: 5, title: "t" } }, []],
  ["github", "issue_comment-no-issue", { "x-github-event": "issue_comment" }, {
    action: "created", repository: repo, comment: { body: "c" } }, []],
  ["github", "review-no-review", { "x-github-event": "pull_request_review" }, {
    action: "submitted", repository: repo, pull_request: { number: 7 } }, []],
  ["github", "workflow_run-no-run", { "x-github-event": "workflow_run" }, { action: "completed", repository: repo }, []],
  ["github", "issues-empty-issue", { "x-github-event": "issues" }, {
    action: "opened", repository: repo, issue: {} }, [{ actions: ["opened"] }]],
  // ---------------------------------------------------------------- sentry
  ["sentry", "event_alert", { "sentry-hook-resource": "event_alert" }, {
    action: "triggered", actor: { name: "Sentry", type: "application" },
    data: { triggered_rule: "High error rate", event: { title: "TypeError: Cannot read property",
      web_url: "https://sentry.io/issues/123", message: "Something went wrong" } },
  }, [{}, { resources: ["event_alert", "metric_alert"] }, { resources: ["issue"] }]],
  ["sentry", "metric_alert", { "sentry-hook-resource": "metric_alert" }, {
    action: "resolved", actor: { name: "Bot", type: "application" },
    data: { metric_alert: { title: "P95 latency > 1s", web_url: "https://sentry.io/alerts/456",
      organization: { slug: "my-org" } } },
  }, [{ resources: ["metric_alert"] }]],
  ["sentry", "issue", { "sentry-hook-resource": "issue" }, {
    action: "assigned", actor: { name: "Alice", type: "user" },
    data: { issue: { title: "NullPointerException", web_url: "https://sentry.io/issues/789",
      project: { slug: "backend" }, assignedTo: { name: "Alice" } } },
  }, [{ resources: ["issue"] }]],
  ["sentry", "error", { "sentry-hook-resource": "error" }, {
    action: "created", actor: { type: "application" },
    data: { error: { title: "ReferenceError", web_url: "https://sentry.io/errors/111",
      message: "x is not defined", project: { slug: "frontend" } } },
  }, []],
  ["sentry", "comment", { "sentry-hook-resource": "comment" }, {
    action: "created", actor: { name: "Bob", type: "user" },
    data: { comment: { text: "Looking into this" }, issue: { title: "Server crash",
      web_url: "https://sentry.io/issues/222", project: { slug: "api" } } },
  }, []],
  ["sentry", "installation", { "sentry-hook-resource": "installation" }, {
    action: "created", actor: { name: "Admin", type: "user" },
  }, [{ resources: ["installation"] }]],
  ["sentry", "unknown-no-action", { "sentry-hook-resource": "deploy" }, { actor: { name: "CI" } }, []],
  ["sentry", "no-actor", { "sentry-hook-resource": "issue" }, {
    action: "created", data: { issue: { title: "Test", project: { slug: "p" } } },
  }, []],
  ["sentry", "actor-type", { "sentry-hook-resource": "issue" }, {
    action: "created", actor: { type: "application" },
    data: { issue: { title: "Test", project: { slug: "p" } } },
  }, []],
  ["sentry", "event_alert-no-data", { "sentry-hook-resource": "event_alert" }, {
    action: "triggered", actor: { name: "Sentry" },
  }, []],
  ["sentry", "no-resource-header", {}, { action: "created", data: { issue: { title: "x" } } }, []],
  // ---------------------------------------------------------------- linear
  ["linear", "issue", {}, {
    action: "create", type: "Issue", organizationId: "org-123",
    data: { id: "issue-456", number: 123, title: "Bug in login", description: "Users cannot log in",
      url: "https://linear.app/org/issue/123", creator: { email: "user@example.com" },
      assignee: { email: "dev@example.com" }, labels: [{ name: "bug" }, { name: "high-priority" }] },
    createdBy: { email: "user@example.com" },
  }, [{}, { events: ["issues"] }, { events: ["issue_comment"] }, { actions: ["create"] },
      { organizations: ["org-123"] }, { organizations: ["org-x"] }, { labels: ["bug"] },
      { labels: ["nope"] }, { assignee: "dev@example.com" }, { author: "user@example.com" },
      { author: "other@example.com" }]],
  ["linear", "comment", {}, {
    action: "create", type: "Comment", organizationId: "org-123",
    data: { id: "comment-789", body: "This might be related to the auth service",
      url: "https://linear.app/org/issue/123#comment-789",
      issue: { number: 123, title: "Bug in login", url: "https://linear.app/org/issue/123",
        creator: { email: "user@example.com" }, labels: [{ name: "bug" }] } },
    updatedBy: { email: "commenter@example.com" },
  }, [{ events: ["issue_comment"] }, { labels: ["bug"] }]],
  ["linear", "project", {}, {
    action: "update", type: "Project", organizationId: "org-123",
    data: { id: "p1", title: "Q3 roadmap", url: "https://linear.app/org/project/p1" },
  }, [{ events: ["project"] }]],
  ["linear", "project-untitled", {}, {
    action: "remove", type: "Cycle", data: { id: "c1", team: { organization: { id: "org-9" } } },
  }, [{ organizations: ["org-9"] }]],
  ["linear", "no-organization", {}, { action: "create", type: "Issue", data: { title: "x" } }, []],
  ["linear", "no-action", {}, { type: "Issue", organizationId: "org-1", data: { title: "x" } }, []],
  ["linear", "no-type", {}, { action: "create", organizationId: "org-1", data: { title: "x" } }, []],
  ["linear", "no-data", {}, { action: "create", type: "Issue", organizationId: "org-1" }, []],
  ["linear", "comment-no-issue", {}, {
    action: "create", type: "Comment", organizationId: "org-1", data: { body: "c" } }, []],
  // ---------------------------------------------------------------- mintlify
  ["mintlify", "succeeded", {}, {
    event: "build", action: "succeeded", project: "docs", branch: "main",
    url: "https://docs.example.com", user: { email: "writer@example.com" },
    timestamp: "2026-01-05T12:00:00.000Z",
  }, [{}, { projects: ["docs"] }, { projects: ["api"] }, { branches: ["main"] },
      { branches: ["dev"] }, { actions: ["succeeded"] }, { events: ["build"] }]],
  ["mintlify", "failed", {}, {
    action: "failed", project: "docs", git: { branch: "staging" }, error: "Broken link",
    build_url: "https://dashboard.mintlify.com/builds/1", user: { name: "Writer" },
  }, [{ branches: ["staging"] }]],
  ["mintlify", "no-branch", {}, { status: "success", organization: "acme-org" },
   [{ branches: ["main"] }, { branches: ["dev"] }, { projects: ["acme-org"] }]],
  ["mintlify", "no-action", {}, { event: "build", project: "docs" }, []],
  ["mintlify", "empty-action", {}, { event: "build", action: "", project: "docs" }, []],
  // ---------------------------------------------------------------- slack
  ["slack", "message", {}, {
    type: "event_callback", team_id: "T123",
    event: { type: "message", text: "Hello world", user: "U456", channel: "C789", ts: "1.2" },
  }, [{}, { events: ["message"] }, { events: ["app_mention"] }, { team_ids: ["T123"] },
      { team_ids: ["T999"] }, { channels: ["C789"] }, { channels: ["C000"] }]],
  ["slack", "app_mention", {}, {
    type: "event_callback", team_id: "T123",
    event: { type: "app_mention", text: "<@U0BOT> help", user: "U456", channel: "C789" },
  }, [{ channels: ["C789"] }]],
  ["slack", "reaction_added", {}, {
    type: "event_callback", team_id: "T123",
    event: { type: "reaction_added", reaction: "thumbsup", user: "U456",
      item: { type: "message", channel: "C789", ts: "1.2" } },
  }, [{ events: ["reaction_added"] }]],
  ["slack", "bot-message", {}, {
    type: "event_callback", team_id: "T123",
    event: { type: "message", text: long, bot_id: "B111", channel: "C789" },
  }, []],
  ["slack", "unknown", {}, {
    type: "event_callback", team_id: "T123",
    event: { type: "channel_created", channel: { id: "C1", name: "new" } },
  }, [{ channels: ["C1"] }]],
  ["slack", "url_verification", {}, { type: "url_verification", challenge: "abc" }, []],
  ["slack", "no-event", {}, { type: "event_callback", team_id: "T123" }, []],
  ["slack", "other-type", {}, { type: "block_actions", team_id: "T123" }, []],
  // ---------------------------------------------------------------- discord
  ["discord", "command", {}, {
    type: 2, id: "i1", guild_id: "G1", channel_id: "C1",
    member: { user: { id: "u1", username: "alice" } },
    data: { name: "deploy", options: [{ name: "env", value: "prod" }, { name: "force", value: true }] },
  }, [{}, { events: ["application_command"] }, { guilds: ["G1"] }, { guilds: ["G2"] },
      { channels: ["C1"] }, { channels: ["C2"] }, { commands: ["deploy"] }, { commands: ["other"] }]],
  ["discord", "command-no-options", {}, {
    type: 2, id: "i2", guild_id: "G1", channel_id: "C1",
    member: { user: { username: "alice" } }, data: { name: "status" },
  }, []],
  ["discord", "component", {}, {
    type: 3, id: "i3", guild_id: "G1", channel_id: "C1",
    member: { user: { username: "bob" } }, data: { custom_id: "approve_btn", component_type: 2 },
  }, [{ commands: ["deploy"] }, { events: ["message_component"] }]],
  ["discord", "autocomplete", {}, {
    type: 4, id: "i4", guild_id: "G1", channel_id: "C1",
    member: { user: { username: "alice" } }, data: { name: "deploy" },
  }, [{ commands: ["deploy"] }, { commands: ["other"] }]],
  ["discord", "modal", {}, {
    type: 5, id: "i5", guild_id: "G1", channel_id: "C1",
    member: { user: { username: "alice" } }, data: { custom_id: "feedback_form" },
  }, [{ commands: ["deploy"] }]],
  ["discord", "dm", {}, {
    type: 2, id: "i6", channel_id: "D1", user: { username: "carol" }, data: { name: "help" },
  }, [{ guilds: ["G1"] }, { channels: ["D1"] }]],
  ["discord", "no-user", {}, { type: 2, id: "i7", guild_id: "G1", data: { name: "help" } },
   [{ channels: ["C1"] }]],
  ["discord", "ping", {}, { type: 1 }, []],
  ["discord", "unknown-type", {}, { type: 9, id: "i9" }, []],
  ["discord", "no-type", {}, { id: "i10" }, []],
  // ---------------------------------------------------------------- twitter
  ["twitter", "tweet_create", {}, {
    for_user_id: "123", tweet_create_events: [{ id_str: "999", text: "Hello @bot",
      user: { screen_name: "alice", id_str: "456" }, created_at: "Mon Jan 05 12:00:00 +0000 2026" }],
  }, [{}, { events: ["tweet_create_events"] }, { events: ["favorite_events"] },
      { users: ["123"] }, { users: ["999"] }]],
  ["twitter", "tweet_create-no-screen-name", {}, {
    for_user_id: "123", tweet_create_events: [{ id_str: "1000", text: "hi", user: { id_str: "456" } }],
  }, []],
  ["twitter", "tweet_create-no-user", {}, {
    for_user_id: "123", tweet_create_events: [{ id_str: "1001", text: "hi" }],
  }, []],
  ["twitter", "tweet_delete", {}, {
    for_user_id: "123", tweet_delete_events: [{ status: { id: "777", user_id: "456" },
      user_id: "456", timestamp_ms: "1767614400000" }],
  }, []],
  ["twitter", "favorite", {}, {
    for_user_id: "123", favorite_events: [{ id: "f1", user: { screen_name: "bob", id_str: "2" },
      favorited_status: { id_str: "888", text: "My tweet", user: { screen_name: "alice" } } }],
  }, []],
  ["twitter", "follow", {}, {
    for_user_id: "123", follow_events: [{ type: "follow", created_timestamp: "1767614400000",
      source: { id: "9", screen_name: "carol" }, target: { id: "123", screen_name: "bot" } }],
  }, []],
  ["twitter", "follow-no-screen-name", {}, {
    for_user_id: "123", follow_events: [{ type: "follow", source: { id: "9" }, target: { id: "123" } }],
  }, []],
  ["twitter", "unfollow", {}, {
    for_user_id: "123", unfollow_events: [{ source: { screen_name: "carol" }, target: { screen_name: "bot" } }],
  }, []],
  ["twitter", "block", {}, {
    for_user_id: "123", block_events: [{ source: { screen_name: "bot" }, target: { screen_name: "spam" } }],
  }, []],
  ["twitter", "unblock-no-names", {}, {
    for_user_id: "123", unblock_events: [{ source: { id: "1" }, target: {} }],
  }, []],
  ["twitter", "mute", {}, {
    for_user_id: "123", mute_events: [{ source: { screen_name: "bot" }, target: { screen_name: "noisy" } }],
  }, []],
  ["twitter", "unmute", {}, {
    for_user_id: "123", unmute_events: [{ source: { screen_name: "bot" }, target: { screen_name: "noisy" } }],
  }, []],
  ["twitter", "direct_message", {}, {
    for_user_id: "123", direct_message_events: [{ type: "message_create", created_timestamp: "1767614400000",
      message_create: { sender_id: "456", target: { recipient_id: "123" },
        message_data: { text: "Hi there" } } }],
  }, []],
  ["twitter", "direct_message-no-sender", {}, {
    for_user_id: "123", direct_message_events: [{ message_create: { message_data: { text: "?" } } }],
  }, []],
  ["twitter", "typing", {}, {
    for_user_id: "123", direct_message_indicate_typing_events: [{ sender_id: "456",
      target: { recipient_id: "123" }, created_timestamp: "1767614400000" }],
  }, []],
  ["twitter", "typing-no-sender", {}, {
    for_user_id: "123", direct_message_indicate_typing_events: [{ target: { recipient_id: "123" } }],
  }, []],
  ["twitter", "mark_read", {}, {
    for_user_id: "123", direct_message_mark_read_events: [{ sender_id: "456",
      target: { recipient_id: "123" }, last_read_event_id: "1" }],
  }, []],
  ["twitter", "unknown-key", {}, { for_user_id: "123", tweet_quote_events: [{ id: "1" }] }, []],
  ["twitter", "empty-array", {}, { for_user_id: "123", favorite_events: [] }, []],
  ["twitter", "no-events", {}, { for_user_id: "123", user_has_blocked: false }, []],
];

const out = [];
for (const [source, id, headers, body, filters] of cases) {
  const context = providers[source].parseEvent(headers, body);
  if (context) delete context.timestamp; // the time of parsing, or of the event: not compared
  const matches = context ? filters.map((f) => [f, providers[source].matchesFilter(context, f)]) : [];
  out.push({ source, id, headers, body, context, matches });
}
console.log(JSON.stringify(out, null, 1));
