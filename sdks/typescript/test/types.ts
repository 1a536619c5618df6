// Not run: type-checked by ci.sh (tsc --noEmit --strict), so that src/index.d.ts stays true to
// how the package is used in TypeScript.

import { ApiError, Client, TaskError, Worker, TASK_LOCK_LOST, codes, toIso, toMillis } from "sutra-worker";
import type { CompleteItem, Instance, LockedTask, Take, Task } from "sutra-worker";

interface Movement {
  account: string;
  amount: number;
}

export async function example(yamlText: string): Promise<void> {
  const client = new Client({ url: "http://127.0.0.1:7480", token: undefined });
  const deployed = await client.deploy(yamlText);
  const version: number = deployed.version;
  const sent = await client.send("orders", { id: "evt-1", type: "order.placed", data: { order: "o-1", amount: 5 } });
  if ("dedup" in sent) {
    const instance: Instance = await client.instance(sent.instance);
    const status: Instance["status"] = instance.status;
    void status;
  }
  void version;

  const worker = new Worker({ url: "http://127.0.0.1:7480", workerId: "ts-1", concurrency: 8, lock: "PT1M", pollWait: 20_000, handleSignals: true });
  worker
    .task<Movement>("debit-account", async (task: Task<Movement>) => {
      if (task.signal.aborted) throw TaskError.retry("stopping");
      if (task.input.amount > 100) throw new TaskError("FUNDS.INSUFFICIENT", `${task.input.account} is short`);
      return { ok: true, attempt: task.attempt };
    })
    .task("credit-account", () => ({ ok: true }));
  const running: Promise<void> = worker.run();
  await worker.stop();
  await running;

  try {
    const tasks: LockedTask[] = await client.poll({ worker: "ts-2", topics: ["debit-account"], max: 2, wait: "PT5S" });
    const results = await client.completeMany(tasks.map((t) => ({ id: t.id, lock_token: t.lock_token, output: null })));
    for (const result of results) {
      if (result.error) console.log(result.error.code);
      else console.log(result.state);
    }
    const take: Take = { worker: "ts-2", topics: ["debit-account", "credit-account"], lock: "PT1M" };
    const asking: CompleteItem[] = tasks.map((t) => ({ id: t.id, lock_token: t.lock_token, output: { ok: true }, take }));
    for (const result of await client.completeMany(asking)) {
      const next: LockedTask | undefined = result.taken;
      if (next) console.log(next.topic, next.lock_expires_at);
    }
  } catch (error) {
    if (error instanceof ApiError && error.code === TASK_LOCK_LOST && error.retryable === false && error.kind === "problem") {
      console.log(error.status, error.detail);
    }
  }
  const ms: number = toMillis("PT1S");
  const iso: string = toIso(ms);
  const code: "WORKER.HANDLER.FAILED" = codes.HANDLER_FAILED;
  void iso;
  void code;
}
