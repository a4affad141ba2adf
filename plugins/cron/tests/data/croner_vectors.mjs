// Regenerates croner_vectors.json: what croner (the cron library Action Llama 0.29.1 uses)
// answers for each pattern: valid or not, and the next and previous ticks in a few zones.
//   node croner_vectors.mjs /path/to/node_modules/croner/dist/croner.js > croner_vectors.json
const { Cron } = await import(process.argv[2]);

const patterns = [
  "0 * * * *", "*/15 * * * *", "@daily", "@hourly", "@weekly", "@monthly", "@yearly",
  "@annually", "@midnight", "0 0 * * 0", "30 2 * * 1-5", "*/10 * * * * *", "0 */5 * * * *",
  "15 30 9 * * MON-FRI", "0 0 12 * * * 2027", "0 0 0 1 1 * 2026-2030/2", "0 12 L * *",
  "0 12 LW * *", "0 12 15W * *", "0 12 1W * *", "0 12 31W * *", "0 12 * * 5#2", "0 12 * * FRI#L",
  "0 12 * * 5L", "0 12 * * 5-6#L", "0 12 1 * +MON", "0 12 1 * MON", "0 12 13 * 5",
  "0 0 ? * MON", "0 0 * * ?", "0 0 * * 7", "0 0 * * 0-7", "0 0 * * FRI-SUN", "0 0 * * */2",
  "0 0 * * 1-7/3", "0 0 */5 * *", "0 0 1 */3 *", "0 0 1 JAN,jul *", "5-10/2 * * * *",
  "0 9-17 * * *", "0 0 29 2 *", "0 0 15L * *", "*/60 * * * *", "0-59/60 * * * *",
  "* */24 * * *", "0 0 */31 * *", "0 0 1 */12 *", "0 0 * * */7", "*/59 * * * * *",
  "0 0 1 1 * 0", "30 2 * * *", "*/20 * * * *", "0 0 31 * *", "0 0 30 2 *",
  // invalid
  "0 25 * * *", "*/61 * * * *", "61 * * * *", "* * 32 * *", "* * 0 * *", "* * * 13 *",
  "* * * 0 *", "* * * * 8", "5-1 * * * *", "*/0 * * * *", "1/5 * * * *", "/5 * * * *",
  "* * * *", "* * * * * * * *", "@reboot", "a * * * *", "* * */32 * *", "* * * */13 *",
  "* * * * */8", "1,2,,3 * * * *", "0 0 * * L", "0 0 0 1 1 * 10000", "0 0 0 * * * */2",
  "0 0 * * 1#6", "0 0 1-5W * *", "0 0 */2W * *", "5W * * * *", "0 0 * * +", "1-2-3 * * * *",
  "0 0 1 * 5#", "", "invalid-cron",
];
const starts = ["2026-01-01T00:00:00Z", "2026-03-28T12:00:00Z", "2026-10-24T23:59:59Z",
  "2026-02-27T10:00:30Z"];
const zones = ["UTC", "Europe/Berlin", "America/New_York"];
const out = [];
for (const pattern of patterns) {
  const entry = { pattern };
  try {
    new Cron(pattern, { paused: true }).stop();
    entry.valid = true;
    entry.runs = [];
    for (const timezone of zones) {
      for (const start of starts) {
        const job = new Cron(pattern, { paused: true, timezone });
        const run = { timezone, start: new Date(start).getTime() / 1000 };
        run.next = job.nextRuns(4, new Date(start)).map((d) => d.getTime() / 1000);
        try {
          run.prev = job.previousRuns(2, new Date(start)).map((d) => d.getTime() / 1000);
        } catch {
          // croner 10.0.1's previousRuns throws for some patterns (0 0 29 2 *): not compared
        }
        job.stop();
        entry.runs.push(run);
      }
    }
  } catch (err) {
    entry.valid = false;
    entry.error = err.message;
  }
  out.push(entry);
}
console.log(JSON.stringify(out, null, 1));
