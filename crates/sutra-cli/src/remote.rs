//! What every command that talks to a server shares: the client, the async runtime, printing
//! in either form, and how a failure becomes stderr text and an exit code.
//!
//! Exit codes: 1 when the server refused the request (the problem's code and detail are
//! printed, with what to do about it), 2 when there is no usable server or the input is
//! unusable (nothing was asked of a server, so nothing was refused).

use std::future::Future;
use std::process::ExitCode;

use serde::Serialize;
use sutra_client::{ApiError, Client, Problem, TransportError};
use sutra_core::codes::{self, Code};

use crate::output::write_stdout;

/// A command's connection to the server and its output form.
pub struct Context {
    pub client: Client,
    /// `--json`: print the server's answers as JSON, for scripts.
    pub json: bool,
}

impl Context {
    /// Prints `value` as JSON under `--json`, otherwise as `human` renders it.
    pub fn print<T: Serialize>(&self, value: &T, human: impl FnOnce(&T) -> String) {
        if self.json {
            write_stdout(&json(value));
        } else {
            write_stdout(&human(value));
        }
    }
}

/// Why a command failed.
pub enum CommandError {
    Api(ApiError),
    /// The command's input is unusable: an unreadable file, malformed JSON.
    Usage(String),
}

impl From<ApiError> for CommandError {
    fn from(error: ApiError) -> CommandError {
        CommandError::Api(error)
    }
}

/// The id of the instance a command acts on.
#[derive(clap::Args)]
pub struct InstanceId {
    /// The instance's id (see `sutra instances list`).
    #[arg(value_name = "ID")]
    pub id: String,
}

/// Where commands send their requests, and as whom.
pub struct Server<'a> {
    /// `--server`.
    pub url: &'a str,
    /// `--token`: never printed.
    pub token: Option<&'a str>,
}

impl Server<'_> {
    fn client(&self) -> Result<Client, sutra_client::InvalidUrl> {
        let client = Client::new(self.url)?;
        Ok(match self.token {
            Some(token) => client.with_token(token),
            None => client,
        })
    }
}

/// Runs `command` against `server` and turns its outcome into an exit code.
pub fn run<F, Fut>(server: &Server, json: bool, command: F) -> ExitCode
where
    F: FnOnce(Context) -> Fut,
    Fut: Future<Output = Result<(), CommandError>>,
{
    let client = match server.client() {
        Ok(client) => client,
        Err(error) => return usage(&error.to_string()),
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => return usage(&format!("cannot start the async runtime: {error}")),
    };
    match runtime.block_on(command(Context { client, json })) {
        Ok(()) => ExitCode::SUCCESS,
        Err(CommandError::Usage(message)) => usage(&message),
        Err(CommandError::Api(ApiError::Problem(problem))) => {
            if json {
                write_stdout(&self::json(&problem));
            } else {
                eprint!("{}", refusal(&problem));
            }
            ExitCode::from(1)
        }
        Err(CommandError::Api(ApiError::Transport(error))) => {
            eprint!("{}", unreachable(server.url, &error));
            ExitCode::from(2)
        }
        Err(CommandError::Api(unexpected)) => {
            eprintln!("sutra: {unexpected}");
            eprintln!("hint: is {} a Sutra server of this version?", server.url);
            ExitCode::from(2)
        }
    }
}

fn usage(message: &str) -> ExitCode {
    eprintln!("sutra: {message}");
    ExitCode::from(2)
}

fn json<T: Serialize>(value: &T) -> String {
    let text = serde_json::to_string_pretty(value).expect("answers are JSON values");
    format!("{text}\n")
}

/// The problem's code and detail, any violations, and what to do: the action documented for
/// the code (`docs/errors.md`), or nothing for a flow's own codes.
fn refusal(problem: &Problem) -> String {
    let mut text = if problem.detail.contains('\n') {
        // Rendered diagnostics read best first, with the code as their summary line.
        format!(
            "{}\nsutra: {}: {}\n",
            problem.detail.trim_end(),
            problem.code,
            problem.title
        )
    } else {
        format!("sutra: {}: {}\n", problem.code, problem.detail)
    };
    if let Some(violations) = problem
        .extensions
        .get("violations")
        .and_then(|v| v.as_array())
    {
        for violation in violations {
            let message = violation["message"].as_str().unwrap_or("");
            match violation["pointer"].as_str().unwrap_or("") {
                "" => text.push_str(&format!("  - {message}\n")),
                pointer => text.push_str(&format!("  - at {pointer}: {message}\n")),
            }
        }
    }
    if let Some(code) = sutra_core::codes::lookup(&problem.code) {
        text.push_str(&format!("hint: {}\n", hint(code)));
    }
    text
}

/// What to do, in the command line's terms where the documented action speaks HTTP.
fn hint(code: Code) -> &'static str {
    if code == codes::AUTH_UNAUTHENTICATED {
        "the server requires an API token: pass it with --token TOKEN, or set SUTRA_TOKEN"
    } else {
        code.action
    }
}

fn unreachable(server: &str, error: &TransportError) -> String {
    if error.is_connect() {
        format!(
            "sutra: cannot reach a Sutra server at {server}: {}\n\
             hint: start one with `sutra serve`, or point --server (or SUTRA_SERVER) at a running server\n",
            error.reason()
        )
    } else {
        format!(
            "sutra: the Sutra server at {server} did not answer: {error}\n\
             hint: check that it is healthy (GET /readyz), then try again\n"
        )
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn problem(code: &str, detail: &str) -> Problem {
        serde_json::from_value(json!({
            "type": format!("urn:sutra:error:{code}"), "title": "Deployment is invalid",
            "status": 400, "code": code, "detail": detail, "retryable": false,
        }))
        .unwrap()
    }

    #[test]
    fn a_refusal_names_its_code_and_detail_and_says_what_to_do() {
        let text = refusal(&problem("SUTRA.INSTANCE.NOT_FOUND", "no instance 42"));
        assert_eq!(
            text,
            "sutra: SUTRA.INSTANCE.NOT_FOUND: no instance 42\n\
             hint: No instance has this id in your tenant. Check the id with `sutra instances list`.\n"
        );
    }

    #[test]
    fn rendered_diagnostics_come_first_and_the_code_sums_them_up() {
        let text = refusal(&problem(
            "SUTRA.DEPLOY.INVALID",
            "error[dangling-reference]: …\n  --> deployment.yaml:3:5\n",
        ));
        assert!(
            text.starts_with("error[dangling-reference]: …\n  --> deployment.yaml:3:5\nsutra: SUTRA.DEPLOY.INVALID: Deployment is invalid\nhint: Fix the errors"),
            "{text}"
        );
    }

    #[test]
    fn a_flows_own_failure_code_has_no_hint() {
        let text = refusal(&problem("ORDER.EXPIRED", "no payment for o1"));
        assert_eq!(text, "sutra: ORDER.EXPIRED: no payment for o1\n");
    }

    #[test]
    fn validation_violations_are_listed_by_pointer() {
        let mut problem = problem("SUTRA.INTAKE.VALIDATION", "the data does not match");
        problem.extensions.insert(
            "violations".into(),
            json!([
                {"pointer": "/amount", "message": "must be a number"},
                {"pointer": "", "message": "\"to\" is a required property"},
            ]),
        );
        assert!(
            refusal(&problem)
                .contains("  - at /amount: must be a number\n  - \"to\" is a required property\n"),
            "{}",
            refusal(&problem)
        );
    }
}
