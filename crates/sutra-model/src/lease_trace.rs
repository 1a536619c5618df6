//! The lease model's counterexamples as a reviewer reads them: one numbered line per action, with
//! the database's time (`t`, counted in ticks from the start), what each replica's clock did, and
//! what the lease row said.

use stateright::Path;

use crate::lease::{Answer, Holder, LeaseAction, LeaseModel, LeaseRow, LeaseState};

pub fn narrate(model: &LeaseModel, path: &Path<LeaseState, LeaseAction>) -> String {
    let steps = path.clone().into_vec();
    let mut now: u32 = 0;
    let actions = steps.windows(2).enumerate().map(|(i, pair)| {
        let [(before, Some(action)), (after, _)] = pair else {
            unreachable!("every state but the last has the action taken from it");
        };
        if let LeaseAction::Tick { .. } = action {
            now += 1;
        }
        let line = describe(before, *action, after, now);
        format!("{:>2}. t={now}: {line}", i + 1)
    });
    let actions: Vec<_> = actions.collect();
    let start = format!(" 0. t=0: {}", world(model));
    let end = format!("    end: {}", summary(path.last_state(), now));
    let lines: Vec<_> = std::iter::once(start).chain(actions).chain([end]).collect();
    lines.join("\n")
}

fn world(model: &LeaseModel) -> String {
    let reference = if model.protocol.counts_from_the_send() {
        "the send"
    } else {
        "the reply"
    };
    let drift = match model.setup.drift {
        0 => "clocks do not drift".to_owned(),
        drift => format!(
            "a clock may fall {} behind the database's per term",
            ticks(drift)
        ),
    };
    format!(
        "{} replicas contend for one role; the TTL is {} ticks, a term lasts {} ticks of the \
         replica's clock from {reference}; {drift}",
        model.setup.replicas,
        model.setup.ttl,
        model.local_term(),
    )
}

fn summary(state: &LeaseState, now: u32) -> String {
    let replicas = state.replicas.iter().enumerate().map(|(r, contender)| {
        let me = holder(Holder {
            replica: r as u8,
            incarnation: contender.incarnation,
        });
        match (contender.up, contender.term) {
            (false, _) => format!("{me} is down"),
            (true, None) => format!("{me} leads nothing"),
            (true, Some(term)) => format!(
                "{me} leads at epoch {} ({} of its clock left)",
                term.epoch,
                ticks(term.left)
            ),
        }
    });
    let lease = std::iter::once(format!("the lease is {}", row(&state.lease, now)));
    replicas.chain(lease).collect::<Vec<_>>().join("; ")
}

fn describe(before: &LeaseState, action: LeaseAction, after: &LeaseState, now: u32) -> String {
    match action {
        LeaseAction::Tick { behind } => ticked(before, after, behind),
        LeaseAction::Ask { replica } => format!("r{replica} sends an acquire"),
        LeaseAction::Acquire { replica } => {
            let answer = after.replicas[replica as usize]
                .asking
                .and_then(|a| a.answer);
            let was = &before.lease;
            let me = Holder {
                replica,
                incarnation: before.replicas[replica as usize].incarnation,
            };
            match answer {
                Some(Answer::Granted(_)) => {
                    let why = match was.holder {
                        None => "was free",
                        Some(held) if held == me => "was its own",
                        Some(_) => "had expired",
                    };
                    format!(
                        "the database runs r{replica}'s acquire: the lease {why}, and is now {}",
                        row(&after.lease, now)
                    )
                }
                _ => format!(
                    "the database runs r{replica}'s acquire: refused, the lease is {}",
                    row(was, now)
                ),
            }
        }
        LeaseAction::Hear { replica } => {
            let ask = before.replicas[replica as usize].asking;
            let term = after.replicas[replica as usize].term;
            match (ask.and_then(|a| a.answer), term) {
                (Some(Answer::Granted(epoch)), Some(term)) => format!(
                    "r{replica} hears the grant: it leads at epoch {epoch} for {} of its clock",
                    ticks(term.left)
                ),
                (Some(Answer::Granted(epoch)), None) => format!(
                    "r{replica} hears the grant of epoch {epoch} past its local deadline: it \
                     starts nothing"
                ),
                _ => format!("r{replica} hears the refusal: it leads nothing"),
            }
        }
        LeaseAction::Lose { replica } => {
            let ran = before.replicas[replica as usize]
                .asking
                .is_some_and(|a| a.answer.is_some());
            let when = if ran { "after" } else { "before" };
            let term = if before.replicas[replica as usize].term.is_some() {
                "; its term still ends at its deadline"
            } else {
                ""
            };
            format!("r{replica}'s acquire fails {when} the database ran it{term}")
        }
        LeaseAction::Crash { replica } => {
            format!("r{replica} crashes: its term and its poll task are gone, its lease stays")
        }
        LeaseAction::Restart { replica } => format!(
            "r{replica} restarts as {}",
            holder(Holder {
                replica,
                incarnation: after.replicas[replica as usize].incarnation
            })
        ),
        LeaseAction::Resign { replica } => format!(
            "r{replica} resigns: stops the role's work, then releases the lease, which is now {}",
            row(&after.lease, now)
        ),
    }
}

/// What a tick changed: clocks that fell behind, terms that reached their deadline, a lease that
/// expired.
fn ticked(before: &LeaseState, after: &LeaseState, behind: u8) -> String {
    let mut events = Vec::new();
    for r in 0..before.replicas.len() {
        if behind & 1 << r != 0 {
            events.push(format!("r{r}'s clock falls a tick behind"));
        }
        if before.replicas[r].term.is_some() && after.replicas[r].term.is_none() {
            events.push(format!("r{r}'s term reaches its local deadline: it stops"));
        }
    }
    if before.lease.expires_in > 0 && after.lease.expires_in == 0 {
        events.push("the lease expires by the database's clock".to_owned());
    }
    if events.is_empty() {
        "a tick passes".to_owned()
    } else {
        format!("a tick passes; {}", events.join("; "))
    }
}

fn row(lease: &LeaseRow, now: u32) -> String {
    match lease.holder {
        None => "free".to_owned(),
        Some(h) if lease.expires_in == 0 => {
            format!("{}'s at epoch {}, expired", holder(h), lease.epoch)
        }
        Some(h) => format!(
            "{}'s at epoch {}, until t={}",
            holder(h),
            lease.epoch,
            now + u32::from(lease.expires_in)
        ),
    }
}

fn holder(holder: Holder) -> String {
    format!("r{}.{}", holder.replica, holder.incarnation)
}

fn ticks(n: u8) -> String {
    if n == 1 {
        "1 tick".to_owned()
    } else {
        format!("{n} ticks")
    }
}
