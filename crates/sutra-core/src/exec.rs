//! The step executor: moves an instance from one quiescent point to the next.
//!
//! [`apply`] is a pure function of its arguments. It reads no clock and no random source, so the
//! same flow, snapshot, event and context always give the same [`Step`]; and it never panics,
//! whatever the flow and the event sequence: everything that can go wrong at run time becomes a
//! [`Rejection`] (nothing happened) or a failed instance (SPEC §7.2, `docs/decisions/0005`).
//!
//! Tokens run one node at a time, always the lowest-id runnable one, so the order of effects and
//! history is itself a function of the inputs. History records what an auditor asks about (a
//! message, a timer, a task result, a park, variables set, an emit, a choice, a fork, a join, the
//! ending), not every node visit, so that a loop does not flood it.
//!
//! Within a step the status `Suspended` means "live": the step sets it when it starts running
//! tokens, and it is what the instance rests in unless the step completed, cancelled or failed it.
//!
//! A snapshot whose token names a node its flow lacks (a migration that did not map it) fails the
//! instance with `SUTRA.RUNTIME.NODE.UNKNOWN` rather than panicking.
//!
//! This file is the step driver: the events, the choice of the next token, settling what became
//! of it, parks, endings and failures. What each node kind does when a token reaches it is in
//! `exec/nodes.rs`, what a park's answer does in `exec/answers.rs`, races in `exec/race.rs`, loops
//! in `exec/for_each.rs`, a waiting node's deadline and reminders in `exec/boundary.rs`, calls in
//! `exec/call.rs`, error scopes in `exec/scope.rs`, compensation in `exec/compensation.rs`, and
//! the variables and the budgets expressions spend in `exec/vars.rs`.

mod answers;
mod boundary;
mod call;
mod compensation;
mod for_each;
mod migration;
mod nodes;
mod race;
mod scope;
mod vars;

pub use migration::migrate;

use answers::Answer;

use std::cell::Cell;

use serde_json::{Value, json};

use crate::codes;
use crate::expr::{EvalError, EvalFault};
use crate::model::{After, Flow, Node, NodeIndex};
use crate::snapshot::{
    Failure, Park, ParkId, ParkKind, Role, Snapshot, Status, Token, TokenId, TokenState,
};
use crate::step::{
    ChildOutcome, Disarm, Effect, Event, HistoryEvent, HistoryKind, Message, Rejection, Reply,
    Step, StepContext,
};

/// Applies `event` to the instance in `snapshot`, running every runnable token until each is
/// parked or joining, or the instance has completed, been cancelled or failed.
///
/// Rejected, with nothing changed: `Start` on an instance already started, `Cancel` on one that is
/// not suspended or failed, `Restore` on one that is not failed (`InvalidState`); an answer to a
/// park that no token of a suspended instance holds, or holds as a park of another kind (`Stale`).
pub fn apply(
    flow: &Flow,
    snapshot: &Snapshot,
    event: Event,
    ctx: StepContext,
) -> Result<Step, Rejection> {
    let mut run = Run::new(flow, snapshot, ctx);
    match event {
        Event::Start { message } => run.start(message)?,
        Event::Cancel { reason } => run.cancel(reason)?,
        Event::Restore => run.restore()?,
        Event::Relay { park, message } => run.resume(park, Answer::Message(message))?,
        Event::TimerFired { park } => run.resume(park, Answer::Timer)?,
        Event::TaskCompleted { park, output } => run.resume(park, Answer::Output(output))?,
        Event::TaskFailed { park, error } => run.resume(park, Answer::Error(error))?,
        Event::TaskExhausted { park, error } => run.resume(park, Answer::Exhausted(error))?,
        Event::ChildEnded {
            park,
            child,
            outcome,
        } => run.resume(park, Answer::Child { child, outcome })?,
    }
    Ok(run.finish())
}

/// Fails a live instance for a reason no node produced: the engine learned it outside the
/// executor (a correlation alias already taken when the step committed, a step that keeps dying
/// with its replica). Like every failure (SPEC §7.2) it is stamped in place: every park the
/// snapshot holds is disarmed, tokens keep their parks for restore, and no single token is
/// blamed, so restore re-arms them all.
pub fn fail(
    snapshot: &Snapshot,
    code: &str,
    detail: &str,
    ctx: StepContext,
) -> Result<Step, Rejection> {
    if snapshot.status != Status::Suspended {
        return Err(Rejection::InvalidState {
            event: "fail",
            status: snapshot.status.as_str(),
        });
    }
    let mut failed = snapshot.clone();
    let effects = snapshot
        .parks()
        .map(|park| Effect::Disarm(Disarm::of(park)))
        .collect::<Vec<_>>();
    failed.status = Status::Failed;
    failed.audit_seq += 1;
    failed.failure = Some(Failure {
        code: code.to_owned(),
        detail: detail.to_owned(),
        token: None,
        node: None,
    });
    let history = vec![HistoryEvent {
        seq: failed.audit_seq,
        at: ctx.now,
        kind: HistoryKind::Failed,
        node: None,
        token: None,
        detail: json!({"code": code, "detail": detail}),
    }];
    let reply = Some(Reply::Failed {
        code: code.to_owned(),
        detail: detail.to_owned(),
    });
    let mut effects: Vec<Effect> = effects;
    effects.extend(answer_to_caller(&failed));
    Ok(Step {
        snapshot: failed,
        effects,
        history,
        reply,
    })
}

/// A fatal failure on its way to the snapshot.
struct Fault {
    code: String,
    detail: String,
}

impl Fault {
    fn new(code: &str, detail: impl Into<String>) -> Fault {
        Fault {
            code: code.to_owned(),
            detail: detail.into(),
        }
    }
}

impl From<EvalError> for Fault {
    fn from(error: EvalError) -> Fault {
        let code = match error.fault {
            EvalFault::Failed => codes::EXPRESSION_ERROR.code,
            EvalFault::OverBudget => codes::EXPRESSION_BUDGET.code,
        };
        Fault::new(code, error.to_string())
    }
}

/// What became of the token a node was run for.
enum Fate {
    /// It is still live (runnable, parked or joining) and goes back among the instance's tokens.
    Stays,
    /// It ended its branch, or the instance ended with it.
    Ends,
}

type Outcome = Result<Fate, Fault>;

/// One step in progress: the working snapshot and everything the step has produced so far.
struct Run<'a> {
    flow: &'a Flow,
    /// The snapshot the step started from; it tells which parks have rows to disarm.
    before: &'a Snapshot,
    ctx: StepContext,
    snap: Snapshot,
    /// The triggering message as CEL sees it (`msg`); `None` for timers, tasks and admin events.
    msg: Option<Value>,
    instance: Value,
    visits: u32,
    /// Instances called so far in this step: each child's id takes the next seed.
    calls: u32,
    /// The children the instance waited for when the step began, counted at its first call.
    children_before: Option<u32>,
    /// Units the step's expressions may still spend.
    spend: Cell<u64>,
    /// The variables' size in bytes of JSON once the step first checked it, kept current as they
    /// are written after (`exec/vars.rs`).
    vars_bytes: Option<usize>,
    effects: Vec<Effect>,
    history: Vec<HistoryEvent>,
    reply: Option<Reply>,
}

impl<'a> Run<'a> {
    fn new(flow: &'a Flow, before: &'a Snapshot, ctx: StepContext) -> Run<'a> {
        let info = &before.instance;
        Run {
            flow,
            before,
            ctx,
            snap: before.clone(),
            msg: None,
            instance: json!({
                "id": info.id,
                "flow": info.flow,
                "version": info.version,
                "tenant": info.tenant,
                "deployment": info.deployment,
                "parent": info.parent.as_ref().map(|caller| &caller.instance),
            }),
            visits: 0,
            calls: 0,
            children_before: None,
            spend: Cell::new(ctx.expression_cost_max),
            vars_bytes: None,
            effects: Vec::new(),
            history: Vec::new(),
            reply: None,
        }
    }

    fn finish(mut self) -> Step {
        if self.reply.is_some() {
            self.effects.extend(answer_to_caller(&self.snap));
        }
        Step {
            snapshot: self.snap,
            effects: self.effects,
            history: self.history,
            reply: self.reply,
        }
    }

    fn invalid(&self, event: &'static str) -> Rejection {
        Rejection::InvalidState {
            event,
            status: self.snap.status.as_str(),
        }
    }

    // ---- the events --------------------------------------------------------------------------

    fn start(&mut self, message: Message) -> Result<(), Rejection> {
        if self.snap.status != Status::Created {
            return Err(self.invalid("start"));
        }
        self.snap.status = Status::Suspended;
        self.put_var("input", message.data.clone());
        let mut detail = json!({
            "message": message.id,
            "channel": self.flow.start_channel(),
        });
        if let Some(caller) = &self.snap.instance.parent {
            detail["parent"] = json!({"instance": caller.instance, "node": caller.node});
        }
        self.record(HistoryKind::Started, None, detail);
        self.msg = Some(message.to_json());
        match self.flow.entry {
            None => self.complete(Value::Null),
            Some(entry) => {
                // The root token is named after its first node once `goto` has resolved it.
                let mut root = Token {
                    id: self.mint_token(),
                    node: String::new(),
                    parent: None,
                    state: TokenState::Ready,
                    role: None,
                };
                let outcome = self.goto(&mut root, entry);
                self.settle(root, outcome);
                self.run();
            }
        }
        Ok(())
    }

    /// Cancels a suspended or failed instance, or a called one that has not started yet. Its
    /// tokens are dropped; the parks of a suspended instance are disarmed (a failed instance's
    /// parks were disarmed when it failed).
    fn cancel(&mut self, reason: Option<String>) -> Result<(), Rejection> {
        let called = self.snap.instance.parent.is_some();
        let cancellable = match self.snap.status {
            Status::Suspended | Status::Failed => true,
            Status::Created => called,
            Status::Completed | Status::Cancelled => false,
        };
        if !cancellable {
            return Err(self.invalid("cancel"));
        }
        self.tear_down_parks();
        self.snap.tokens.clear();
        self.snap.status = Status::Cancelled;
        // `failure` describes a restorable state; a cancelled instance has none (history keeps it).
        self.snap.failure = None;
        self.record(HistoryKind::Cancelled, None, json!({"reason": reason}));
        self.reply = Some(Reply::Cancelled);
        Ok(())
    }

    /// Undoes a failure (SPEC §7.2): every park comes back under a fresh id, so that a late
    /// delivery for a torn-down park is stale, and the failed token runs its node again. A park
    /// the failed token held (a failure the engine stamped on a parked token, such as a taken
    /// correlation alias) is not re-armed: running the node again makes a new one.
    fn restore(&mut self) -> Result<(), Rejection> {
        if self.snap.status != Status::Failed {
            return Err(self.invalid("restore"));
        }
        let failure = self.snap.failure.take();
        self.snap.status = Status::Suspended;
        self.record(
            HistoryKind::Restored,
            None,
            json!({"code": failure.as_ref().map(|f| &f.code)}),
        );
        let failed = failure.and_then(|f| f.token);
        // The failed token runs its node again, and so does a token that waited for a called
        // instance, which the failure cancelled: each makes its satellites anew.
        let reruns: Vec<TokenId> = (self.snap.tokens.iter())
            .filter(|token| Some(token.id) == failed || call::waits_for_child(token))
            .map(|token| token.id)
            .collect();
        self.snap.tokens.retain(|token| {
            !reruns
                .iter()
                .any(|&rerun| boundary::is_satellite_of(token, rerun))
        });
        for mut token in std::mem::take(&mut self.snap.tokens) {
            match &token.state {
                TokenState::Ready | TokenState::Parked(_) if reruns.contains(&token.id) => {
                    token.state = TokenState::Ready;
                }
                TokenState::Parked(park) => {
                    let kind = park.kind.clone();
                    self.park(&mut token, kind);
                }
                _ => {}
            }
            self.snap.tokens.push(token);
        }
        self.run();
        Ok(())
    }

    /// Delivers `answer` to the token parked on `park`. The delivery consumes the park's rows
    /// itself, so the answered park is not disarmed.
    fn resume(&mut self, park: ParkId, answer: Answer) -> Result<(), Rejection> {
        let position = self.snap.tokens.iter().position(|token| {
            token
                .park()
                .is_some_and(|p| p.id == park && answer.answers(&p.kind))
        });
        let (Status::Suspended, Some(i)) = (self.snap.status, position) else {
            return Err(Rejection::Stale(Some(park)));
        };
        let mut token = self.snap.tokens.remove(i);
        token.state = TokenState::Ready;
        if self.waits_on(&mut token, park, &answer) {
            self.put_back(token);
            return Ok(());
        }
        match token.role {
            Some(Role::Arm { index }) => {
                let (racer, outcome) = self.race_won(token, index, park, answer)?;
                self.settle(racer, outcome);
            }
            Some(Role::Body { index }) => self.body_answered(token, index, park, answer)?,
            Some(Role::Deadline) => {
                let (looping, outcome) = self.loop_deadline(&token, park)?;
                self.settle(looping, outcome);
            }
            Some(Role::Reminder { fired }) => {
                let outcome = self.remind(&mut token, fired);
                self.settle(token, outcome);
            }
            Some(Role::Detached | Role::Compensation { .. }) | None => {
                // The token leaves its node, and what waited beside it goes.
                self.resolve_satellites(token.id);
                let outcome = self.answer(&mut token, park, answer);
                self.settle(token, outcome);
            }
        }
        self.run();
        Ok(())
    }

    // ---- running tokens ----------------------------------------------------------------------

    /// Runs the lowest-id runnable token, one node at a time, until none is left or the instance
    /// is no longer live.
    fn run(&mut self) {
        while self.snap.status == Status::Suspended {
            let Some(i) = self.snap.tokens.iter().position(is_runnable) else {
                return;
            };
            // The token is taken out while it runs, so that the node can change the other tokens
            // (fork, join, cancel them) without aliasing it.
            let mut token = self.snap.tokens.remove(i);
            let outcome = self.advance(&mut token);
            self.settle(token, outcome);
        }
    }

    /// Puts a token that was run back among the instance's tokens, or fails the instance with it.
    fn settle(&mut self, token: Token, outcome: Outcome) {
        match outcome {
            Ok(Fate::Stays) => self.put_back(token),
            Ok(Fate::Ends) => {}
            Err(fault) => {
                let (id, node) = (token.id, token.node.clone());
                self.put_back(token);
                self.fail(id, node, fault);
            }
        }
    }

    fn put_back(&mut self, token: Token) {
        let at = self.snap.tokens.partition_point(|t| t.id < token.id);
        self.snap.tokens.insert(at, token);
    }

    /// Continues at `after`: the next node, or the end of the token's list.
    fn proceed(&mut self, token: &mut Token, after: After) -> Outcome {
        // A handler runs its one node: compensation goes on, not the handler's list.
        if let Some(Role::Compensation { entry }) = token.role {
            return self.handler_done(token, entry);
        }
        match after {
            After::Node(target) => self.goto(token, target),
            After::End => {
                self.end_of_list(token);
                Ok(Fate::Ends)
            }
        }
    }

    fn goto(&mut self, token: &mut Token, target: NodeIndex) -> Outcome {
        token.node = self.node_at(target)?.id.clone();
        token.state = TokenState::Ready;
        Ok(Fate::Stays)
    }

    /// A branch token that runs off its list ends, and its fork waits for one token fewer; when
    /// none is left the fork's token becomes runnable and joins. A reminder's token just ends.
    /// The top-level token running off its list completes the instance. So does a branch token whose fork no longer waits for it
    /// (a snapshot that does not match its flow): nothing else could ever end the instance.
    fn end_of_list(&mut self, token: &Token) {
        if token.role == Some(Role::Detached) {
            return;
        }
        let fork = token.parent.and_then(|parent| {
            self.snap
                .tokens
                .iter_mut()
                .find(|t| t.id == parent)
                .and_then(|t| match &mut t.state {
                    TokenState::Joining { pending } => Some(pending),
                    _ => None,
                })
        });
        match fork {
            Some(pending) => *pending = pending.saturating_sub(1),
            None => self.complete(Value::Null),
        }
    }

    // ---- parks, endings and failures ---------------------------------------------------------

    /// Parks the token on a new park and arms it.
    fn park(&mut self, token: &mut Token, kind: ParkKind) {
        let park = Park {
            id: ParkId(self.snap.next_park),
            kind,
        };
        self.snap.next_park += 1;
        self.record_at(HistoryKind::Parked, token, park_detail(&park));
        self.effects.push(Effect::Arm {
            token: token.id,
            node: token.node.clone(),
            park: park.clone(),
        });
        token.state = TokenState::Parked(park);
    }

    /// Completes the instance: every other token is cancelled and its park resolved.
    fn complete(&mut self, reply: Value) {
        self.tear_down_parks();
        self.snap.tokens.clear();
        self.snap.status = Status::Completed;
        self.record(HistoryKind::Completed, None, json!({}));
        self.snap.reply = reply.clone();
        self.reply = Some(Reply::Completed(reply));
    }

    /// Fails the instance in place (SPEC §7.2): the failing token stays at its node, the others
    /// keep their parks in the snapshot for restore, but no park keeps a live row.
    fn fail(&mut self, token: TokenId, node: String, fault: Fault) {
        let handling = (self.snap.token(token))
            .is_some_and(|t| matches!(t.role, Some(Role::Compensation { .. })));
        // A handler's failure is compensation's, which no scope undoes: the instance fails.
        let fault = if handling {
            self.compensation_failed(token, &node, fault)
        } else if self.caught(token, &node, &fault) {
            return;
        } else {
            fault
        };
        self.tear_down_parks();
        self.snap.status = Status::Failed;
        let detail = json!({"code": fault.code, "detail": fault.detail});
        self.record(HistoryKind::Failed, Some((node.as_str(), token)), detail);
        self.reply = Some(Reply::Failed {
            code: fault.code.clone(),
            detail: fault.detail.clone(),
        });
        self.snap.failure = Some(Failure {
            code: fault.code,
            detail: fault.detail,
            token: Some(token),
            node: Some(node),
        });
    }

    /// Resolves every park the tokens hold: one that had rows before this step is disarmed; one
    /// made in this step loses its `Arm`, so a park made and resolved in one step leaves no trace
    /// among the effects.
    fn tear_down_parks(&mut self) {
        let parks: Vec<Park> = self.snap.parks().cloned().collect();
        for park in &parks {
            self.release(park);
        }
    }

    /// Resolves one park: disarmed when it had rows before this step, its `Arm` dropped when it
    /// was made in this step.
    fn release(&mut self, park: &Park) {
        let id = park.id;
        if self.was_armed(id) {
            self.effects.push(Effect::Disarm(Disarm::of(park)));
        } else {
            self.effects.retain(|effect| match effect {
                Effect::Arm { park: p, .. } => p.id != id,
                Effect::Call { park, .. } => *park != id,
                _ => true,
            });
        }
    }

    /// Whether `park` had live rows when the step began. A failed instance's parks have none: its
    /// failure disarmed them.
    fn was_armed(&self, park: ParkId) -> bool {
        self.before.status == Status::Suspended && self.before.parks().any(|p| p.id == park)
    }

    // ---- lookups, scope and history ----------------------------------------------------------

    fn node_at(&self, index: NodeIndex) -> Result<&'a Node, Fault> {
        self.flow.nodes.get(index.0 as usize).ok_or_else(|| {
            Fault::new(
                codes::NODE_UNKNOWN.code,
                format!("flow `{}` has no node #{}", self.flow.name, index.0),
            )
        })
    }

    fn node_named(&self, id: &str) -> Result<&'a Node, Fault> {
        let index = self.flow.find(id).ok_or_else(|| {
            Fault::new(
                codes::NODE_UNKNOWN.code,
                format!("flow `{}` has no node `{id}`", self.flow.name),
            )
        })?;
        self.node_at(index)
    }

    fn mint_token(&mut self) -> TokenId {
        let id = TokenId(self.snap.next_token);
        self.snap.next_token += 1;
        id
    }

    /// Appends a history event about `token` at its node. Returns its seq.
    fn record_at(&mut self, kind: HistoryKind, token: &Token, detail: Value) -> u64 {
        let node = token.node.clone();
        self.record(kind, Some((&node, token.id)), detail)
    }

    /// Appends a history event, continuing the instance's audit sequence. Returns its seq.
    fn record(&mut self, kind: HistoryKind, at: Option<(&str, TokenId)>, detail: Value) -> u64 {
        self.snap.audit_seq += 1;
        self.history.push(HistoryEvent {
            seq: self.snap.audit_seq,
            at: self.ctx.now,
            kind,
            node: at.map(|(node, _)| node.to_owned()),
            token: at.map(|(_, token)| token),
            detail,
        });
        self.snap.audit_seq
    }
}

/// Runnable: ready to run its node, or joining with no branch left to wait for.
fn is_runnable(token: &Token) -> bool {
    matches!(
        token.state,
        TokenState::Ready | TokenState::Joining { pending: 0 }
    )
}

/// A `parked` event's detail: what the park waits on, without a task's (possibly large) input.
fn park_detail(park: &Park) -> Value {
    match &park.kind {
        ParkKind::Receive { channel, key, due } => {
            json!({"park": park.id, "kind": "receive", "channel": channel, "key": key, "due": due})
        }
        ParkKind::Wait { due } => json!({"park": park.id, "kind": "wait", "due": due}),
        ParkKind::Call {
            flow, child, due, ..
        } => {
            json!({"park": park.id, "kind": "call", "flow": flow, "child": child, "due": due})
        }
        ParkKind::Task { topic, due, .. } => {
            let mut detail = json!({"park": park.id, "kind": "task", "topic": topic});
            // A task's deadline, when it has one: a task without stays recorded as before.
            if let Some(due) = due {
                detail["due"] = json!(due);
            }
            detail
        }
    }
}

/// What an instance that has a caller tells it when the step ends the instance: its `end`
/// reply, its failure, or its cancel. Nothing for an instance a message started.
fn answer_to_caller(snapshot: &Snapshot) -> Option<Effect> {
    let to = snapshot.instance.parent.clone()?;
    let outcome = match Reply::of_ended(snapshot)? {
        Reply::Completed(reply) => ChildOutcome::Completed { reply },
        Reply::Failed { code, detail } => ChildOutcome::Failed { code, detail },
        Reply::Cancelled => ChildOutcome::Cancelled,
    };
    Some(Effect::Answer { to, outcome })
}
