//! `sutra demo`: a newcomer's first five minutes in one command.
//!
//! It starts the engine in this process on a throwaway embedded store, deploys the money
//! transfer of `examples/brokers/money-transfer.yaml` (the bank's replies arrive over AMQP), runs
//! a worker for its two task topics and a stub ledger for its webhook, drives a handful of
//! transfers through it while showing each instance start, park, resume and end, and then says
//! how to go on. When RabbitMQ can be reached, a pretend bank approves the large transfer over
//! AMQP ([`bank`]); when it cannot, the demo says that the transfer waits for a reply nobody
//! sends. Everything it uses is the public surface — the HTTP API through `sutra-client`, and a
//! queue the engine consumes — so what it shows is what a user gets.

mod bank;

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sutra_client::{Client, CloudEvent, Instance, Task, TaskError, Worker};
use tokio::sync::oneshot;

use crate::in_process::{ScratchDir, serve_while};
use crate::output;
use bank::Bank;

const EXAMPLE: &str = include_str!("../../../examples/brokers/money-transfer.yaml");
const EXAMPLE_LEDGER_URL: &str = "http://127.0.0.1:9000/ledger";
const EXAMPLE_BANK_QUEUE: &str = "queue: bank.replies";
/// How long the demo waits for its transfers before saying something is wrong.
const PATIENCE: Duration = Duration::from_secs(60);

#[derive(clap::Args)]
pub struct Args {
    /// Keep the engine, the worker and the ledger running after the transfers, until Ctrl-C,
    /// so that `sutra send`, `sutra instances` and curl can be tried against it.
    #[arg(long)]
    keep_running: bool,
}

/// One transfer the demo sends, and what it shows.
struct Transfer {
    id: &'static str,
    from: &'static str,
    amount: u64,
    story: &'static str,
}

const TRANSFERS: &[Transfer] = &[
    Transfer {
        id: "t-1",
        from: "alice",
        amount: 120,
        story: "debit, credit, ledger, done",
    },
    Transfer {
        id: "t-2",
        from: "bob",
        amount: 75,
        story: "debit, credit, ledger, done",
    },
    Transfer {
        id: "t-3",
        from: "alice",
        amount: 9_900,
        story: "debit, credit, ledger, done",
    },
    Transfer {
        id: "t-4",
        from: "carol",
        amount: 25_000,
        story: "over 10 000: parks until the bank approves (or a day passes)",
    },
    Transfer {
        id: "t-5",
        from: "mallory",
        amount: 60,
        story: "the debit worker refuses: the payment scope undoes it and fails the transfer",
    },
];

pub fn run(args: &Args) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        // Intake evaluates a channel's `correlate` on these threads.
        .thread_stack_size(sutra_core::expr::EVALUATION_STACK_BYTES)
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("sutra demo: cannot start the async runtime: {error}");
            return ExitCode::from(2);
        }
    };
    match runtime.block_on(demo(args.keep_running)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("sutra demo: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn demo(keep_running: bool) -> Result<(), String> {
    let scratch = ScratchDir::create("demo")?;
    let database = scratch.sqlite_datasource();
    let listen = if keep_running {
        "127.0.0.1:7480"
    } else {
        "127.0.0.1:0"
    };
    let amqp_url = crate::in_process::rabbitmq_url();
    let bank = Bank::open(amqp_url.clone()).await;
    // Configured even when RabbitMQ is away: a deployment declaring an AMQP channel needs its
    // broker's URL, and the engine connects again by itself once it is there.
    let sources = sutra_server::config::Sources::defaults()
        .flag("sutra.datasource", Some(&database))
        .flag("sutra.listen", Some(listen))
        .flag("sutra.transports.amqp.url", Some(&amqp_url));
    let bank = bank.map_err(|reason| Unreachable {
        url: sutra_server::redacted(&amqp_url),
        reason,
    });
    let (database, banked) = (&database, bank.as_ref());
    let driven = serve_while(sources, |url| async move {
        drive(&url, database, banked, keep_running).await
    })
    .await;
    if let Ok(bank) = bank {
        bank.close().await;
    }
    driven
}

/// Why the demo runs without its bank.
struct Unreachable {
    url: String,
    reason: String,
}

async fn drive(
    url: &str,
    database: &str,
    bank: Result<&Bank, &Unreachable>,
    keep_running: bool,
) -> Result<(), String> {
    let (ledger_url, ledger) = start_ledger().await?;
    println!("Sutra is running on {url} with an embedded store ({database}).\n");
    let client = Client::new(url).map_err(|e| e.to_string())?;
    let mut example = EXAMPLE.replace(EXAMPLE_LEDGER_URL, &ledger_url);
    if let Ok(bank) = bank {
        example = example.replace(EXAMPLE_BANK_QUEUE, &format!("queue: {}", bank.queue));
    }
    let deployed = client
        .deploy(&example)
        .await
        .map_err(|e| format!("deploying the example failed: {e}"))?;
    println!(
        "Deployed `{}` version {} (examples/brokers/money-transfer.yaml): a payment scope (debit → choice → credit, refunded by compensation if it fails) → ledger webhook → end.",
        deployed.name, deployed.version
    );
    match bank {
        Ok(bank) => println!(
            "The bank answers large transfers over RabbitMQ at {}: Sutra consumes its queue {}.",
            sutra_server::redacted(&bank.url),
            bank.queue
        ),
        Err(unreachable) => println!(
            "RabbitMQ is not reachable at {} ({}): no bank will answer large transfers.",
            unreachable.url, unreachable.reason
        ),
    }
    let (stop_worker, worker_stopped) = oneshot::channel::<()>();
    let worker = tokio::spawn(bank_worker(client.clone()).run(async {
        let _ = worker_stopped.await;
    }));
    println!("Started a worker for the topics debit-account and credit-account.\n");

    let instances = send_transfers(&client).await?;
    watch(&client, &instances, bank.ok()).await?;
    summarize(&client, &instances, &ledger, bank.err()).await?;
    how_to_continue(url, keep_running);
    if keep_running {
        let _ = tokio::signal::ctrl_c().await;
    }
    let _ = stop_worker.send(());
    let _ = worker.await;
    Ok(())
}

#[derive(Deserialize)]
struct Movement {
    account: String,
    amount: u64,
}

#[derive(Serialize)]
struct Receipt {
    account: String,
    amount: u64,
    reference: String,
}

/// A pretend bank: every account can pay, except `mallory`'s.
fn bank_worker(client: Client) -> Worker {
    let receipt = |task: Task<Movement>, kind: &str| Receipt {
        reference: format!("{kind}-{}", &task.id[task.id.len().saturating_sub(6)..]),
        account: task.input.account,
        amount: task.input.amount,
    };
    Worker::new(client, "demo-bank")
        .handler("debit-account", move |task: Task<Movement>| async move {
            if task.input.account == "mallory" {
                return Err(TaskError::business(
                    "INSUFFICIENT_FUNDS",
                    "mallory's account is empty",
                ));
            }
            Ok(receipt(task, "debit"))
        })
        .handler("credit-account", move |task: Task<Movement>| async move {
            Ok(receipt(task, "credit"))
        })
        .poll_wait(Duration::from_secs(1))
}

async fn send_transfers(client: &Client) -> Result<BTreeMap<&'static str, String>, String> {
    let mut instances = BTreeMap::new();
    for transfer in TRANSFERS {
        let data = json!({"transferId": transfer.id, "from": transfer.from, "to": "dave", "amount": transfer.amount});
        let event = CloudEvent::new(
            format!("demo-{}", transfer.id),
            "demo.transfer",
            "sutra-demo",
            data,
        );
        let sent = client
            .send("transfer-requests", &event)
            .await
            .map_err(|e| e.to_string())?;
        let instance = match sent {
            sutra_client::Sent::Accepted(accepted) => accepted.instance.unwrap_or_default(),
            sutra_client::Sent::Replied { instance, .. } => instance.unwrap_or_default(),
        };
        println!(
            "→ sent {} ({} → dave, {}): instance {}  — {}",
            transfer.id,
            transfer.from,
            transfer.amount,
            short(&instance),
            transfer.story
        );
        instances.insert(transfer.id, instance);
    }
    println!();
    Ok(instances)
}

/// Shows every change of each instance's position until all have settled; the bank, if there is
/// one, approves each transfer that waits for it.
async fn watch(
    client: &Client,
    instances: &BTreeMap<&'static str, String>,
    bank: Option<&Bank>,
) -> Result<(), String> {
    let started = Instant::now();
    let mut seen: BTreeMap<&str, String> = BTreeMap::new();
    let mut approved = Vec::new();
    loop {
        let mut settled = 0;
        for (transfer, id) in instances {
            let instance = client.instance(id).await.map_err(|e| e.to_string())?;
            let now = describe(&instance);
            if seen.get(transfer) != Some(&now) {
                println!("  {transfer}  {now}");
                seen.insert(transfer, now);
            }
            if let Some(bank) = bank
                && is_awaiting_the_bank(&instance)
                && !approved.contains(transfer)
            {
                bank.approve(transfer)
                    .await
                    .map_err(|e| format!("the bank could not publish its approval: {e}"))?;
                println!(
                    "  bank  approves {transfer}: a CloudEvent on queue {}",
                    bank.queue
                );
                approved.push(*transfer);
            }
            settled += usize::from(is_settled(&instance, bank.is_some()));
        }
        if settled == instances.len() {
            println!();
            return Ok(());
        }
        if started.elapsed() > PATIENCE {
            return Err("the transfers did not settle within a minute; see the log above".into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Ended, or parked somewhere nothing in the demo will move it from: waiting for a bank when
/// there is none.
fn is_settled(instance: &Instance, banked: bool) -> bool {
    instance.status != "suspended" || (!banked && is_awaiting_the_bank(instance))
}

fn describe(instance: &Instance) -> String {
    match (
        instance.status.as_str(),
        &instance.failure,
        instance.tokens.first(),
    ) {
        ("failed", Some(failure), _) => format!("failed: {} ({})", failure.code, failure.detail),
        ("suspended", _, Some(token)) => format!(
            "suspended at `{}` ({})",
            token.node,
            token
                .park
                .as_ref()
                .map(crate::instances::show::park)
                .unwrap_or_default()
        ),
        (status, _, _) => status.to_owned(),
    }
}

async fn summarize(
    client: &Client,
    instances: &BTreeMap<&'static str, String>,
    ledger: &Ledger,
    unbanked: Option<&Unreachable>,
) -> Result<(), String> {
    let mut rows = Vec::new();
    let mut awaiting_the_bank = Vec::new();
    for (transfer, id) in instances {
        let instance = client.instance(id).await.map_err(|e| e.to_string())?;
        let steps = client.history(id).await.map_err(|e| e.to_string())?.len();
        if is_awaiting_the_bank(&instance) {
            awaiting_the_bank.push(*transfer);
        }
        rows.push(vec![
            transfer.to_string(),
            short(id),
            instance.status.clone(),
            steps.to_string(),
        ]);
    }
    let mut table = output::Table::new(&["TRANSFER", "INSTANCE", "STATUS", "HISTORY EVENTS"]);
    rows.into_iter().for_each(|row| table.row(row));
    print!("{}", table.render());
    let deadline = Instant::now() + PATIENCE;
    // Every completed transfer records one entry: t-4 too, when the bank approved it.
    let entries = if unbanked.is_some() { 3 } else { 4 };
    while ledger.received() < entries && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    println!(
        "\nThe ledger webhook received {} entries, each with an Idempotency-Key.",
        ledger.received()
    );
    for transfer in awaiting_the_bank {
        let url = unbanked.map_or("", |unreachable| unreachable.url.as_str());
        println!(
            "{transfer} waits at `approval` for the bank's reply on `bank-replies`, an AMQP channel,\n\
             and no bank answers without RabbitMQ (none at {url}): after a day its timeout refunds\n\
             the debit. Start RabbitMQ, or set SUTRA_TRANSPORTS_AMQP_URL, and run the demo again\n\
             to see it approved."
        );
    }
    Ok(())
}

/// Parked at the receive whose reply comes from the bank, over a broker.
fn is_awaiting_the_bank(instance: &Instance) -> bool {
    instance.status == "suspended" && instance.tokens.iter().any(|token| token.node == "approval")
}

fn how_to_continue(url: &str, keep_running: bool) {
    let first = if keep_running {
        format!("This engine keeps running at {url} until Ctrl-C. From another terminal:")
    } else {
        "Next: `sutra demo --keep-running` keeps this engine and its worker up (on the default\n\
         address, so no --server flag is needed); then, from another terminal:"
            .to_owned()
    };
    println!(
        "\n{first}
  sutra send transfer-requests --id t-42 --data '{{\"transferId\":\"t-42\",\"from\":\"alice\",\"to\":\"bob\",\"amount\":10}}'
  sutra instances list                 sutra instances show ID
  sutra instances history ID           sutra tasks list
  curl -s http://127.0.0.1:7480/v1/instances
  and the console in a browser: http://127.0.0.1:7480/
Your own engine: `sutra serve` (embedded store in ./sutra.db), `sutra deploy FILE`, and a worker
built with the sutra-client crate. `sutra check FILE` validates a flow offline; the flow language
is in docs/spec.md §2. (`cargo install --path crates/sutra-cli` puts `sutra` on your PATH.)"
    );
}

fn short(id: &str) -> String {
    id.get(id.len().saturating_sub(12)..)
        .unwrap_or(id)
        .to_owned()
}

/// The stub ledger: answers every webhook with 200 and counts them.
#[derive(Clone, Default)]
struct Ledger {
    received: Arc<std::sync::atomic::AtomicUsize>,
}

impl Ledger {
    fn received(&self) -> usize {
        self.received.load(std::sync::atomic::Ordering::Relaxed)
    }
}

async fn start_ledger() -> Result<(String, Ledger), String> {
    let ledger = Ledger::default();
    let counter = ledger.clone();
    let app = axum::Router::new().route(
        "/ledger",
        axum::routing::post(move |body: axum::Json<Value>| {
            let counter = counter.clone();
            async move {
                counter
                    .received
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let transfer = body.0["data"]["transfer"]
                    .as_str()
                    .unwrap_or("?")
                    .to_owned();
                println!("  ledger  webhook for {transfer}");
                axum::http::StatusCode::OK
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| e.to_string())?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok((format!("http://{addr}/ledger"), ledger))
}
