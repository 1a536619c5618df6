// A worker for examples/money-transfer.yaml: the tasks debit-account and credit-account, as
// `sutra demo`'s pretend bank does them. Every account can pay except mallory's, whose debit is
// a business error (INSUFFICIENT_FUNDS): the flow's payment scope catches it, compensates what
// had completed (nothing yet) and fails the transfer with TRANSFER.FAILED.
//
//   node examples/money-transfer-worker.mjs            # work until Ctrl-C / SIGTERM
//   node examples/money-transfer-worker.mjs --demo     # deploy the example, send three
//                                                      # transfers, show how they end, stop
//
// The server is $SUTRA_URL (default http://127.0.0.1:7480), with $SUTRA_TOKEN as its bearer
// token if it has tokens. money-transfer.yaml's channels are http: a bare server takes it:
//
//   sutra serve --db sqlite::memory:

import { readFile } from "node:fs/promises";
import { fileURLToPath } from "node:url";

import { Client, TaskError, Worker } from "sutra-worker";

const url = process.env.SUTRA_URL ?? "http://127.0.0.1:7480";
const token = process.env.SUTRA_TOKEN || undefined;
const demo = process.argv.includes("--demo");

/** A receipt like `sutra demo`'s: the account, the amount, and a reference from the task id. */
const receipt = (task, kind) => ({
  account: task.input.account,
  amount: task.input.amount,
  reference: `${kind}-${task.id.slice(-6)}`,
});

const client = new Client({ url, token });
const worker = new Worker({ client, workerId: `money-transfer-${process.pid}`, concurrency: 8, handleSignals: true })
  .task("debit-account", async (task) => {
    if (task.input.account === "mallory") {
      throw new TaskError("INSUFFICIENT_FUNDS", "mallory's account is empty");
    }
    return receipt(task, "debit");
  })
  .task("credit-account", async (task) => receipt(task, "credit"));

const running = worker.run();
console.log(`worker ${worker.workerId} polling ${url} for debit-account and credit-account`);

if (demo) {
  try {
    await runDemo();
  } finally {
    await worker.stop();
  }
}
await running;

async function runDemo() {
  const yamlPath = fileURLToPath(new URL("../../../examples/money-transfer.yaml", import.meta.url));
  const deployed = await client.deploy(await readFile(yamlPath, "utf8"), { file: "examples/money-transfer.yaml" });
  console.log(`deployed ${deployed.name} version ${deployed.version}`);
  const run = Date.now().toString(36);
  const transfers = [
    { transferId: `${run}-1`, from: "alice", to: "dave", amount: 120 },
    { transferId: `${run}-2`, from: "bob", to: "dave", amount: 75 },
    { transferId: `${run}-3`, from: "mallory", to: "dave", amount: 60 },
  ];
  const instances = [];
  for (const data of transfers) {
    const answer = await client.send("transfer-requests", { id: `transfer-${data.transferId}`, type: "transfer.requested", data });
    console.log(`sent ${data.transferId} (${data.from} → ${data.to}, ${data.amount}): instance ${answer.instance}`);
    instances.push(answer.instance);
  }
  const deadline = Date.now() + 30_000;
  for (const [i, id] of instances.entries()) {
    let instance = await client.instance(id);
    while (!["completed", "failed", "cancelled"].includes(instance.status) && Date.now() < deadline) {
      await new Promise((done) => setTimeout(done, 100));
      instance = await client.instance(id);
    }
    const how = instance.status === "failed" ? `${instance.failure?.code}: ${instance.failure?.detail}` : JSON.stringify(instance.vars.debit ?? null);
    console.log(`${transfers[i].transferId}: ${instance.status} ${how}`);
  }
}
