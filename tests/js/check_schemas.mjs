// Compiles gateway/schemas/*.json with ajv (JSON Schema 2020-12) in its default strict mode, with
// every strict-mode warning an error too, then validates the messages of the JSON-lines files given
// as arguments ({"schema": "server.json", "message": {...}} a line).  Prints one JSON line:
// {"compiled": [...], "validated": n, "errors": [...]}; exits 1 on any error.  Run by
// tests/test_schemas.py (`npm install` in tests/js first; .ci/run does it).
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import Ajv2020 from "ajv/dist/2020.js";

const dir = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "gateway", "schemas");
const names = ["client.json", "server.json", "view.json", "events.json"];
const errors = [];
const logger = { log() {}, warn: (...a) => errors.push(`warning: ${a.join(" ")}`), error: (...a) => errors.push(a.join(" ")) };
const validators = {};
for (const name of names) {
  const ajv = new Ajv2020({ logger });  // the defaults: strict mode
  try {
    validators[name] = ajv.compile(JSON.parse(readFileSync(join(dir, name), "utf8")));
  } catch (err) {
    errors.push(`${name}: ${err.message}`);
  }
}
let validated = 0;
for (const file of process.argv.slice(2)) {
  for (const line of readFileSync(file, "utf8").split("\n")) {
    if (!line.trim()) continue;
    const { schema, message } = JSON.parse(line);
    const v = validators[schema];
    if (!v) continue;
    validated += 1;
    if (!v(message)) errors.push(`${schema}: ${JSON.stringify(v.errors.slice(0, 3))} in ${line.slice(0, 300)}`);
  }
}
console.log(JSON.stringify({ compiled: Object.keys(validators), validated, errors }));
process.exit(errors.length ? 1 : 0);
