//! CEL expressions and templates.
//!
//! Expressions are compiled once, when a deployment is checked, and evaluated per step. The CEL
//! crate is 0.x and changes in every minor release, so nothing outside this module names it.
//!
//! Two limits protect the process rather than the user: the CEL parser and evaluator recurse per
//! nesting level, and a deep enough expression overflows the stack, which aborts the process (it
//! cannot be caught). So the source's bracket nesting is bounded before parsing, parsing runs on a
//! thread with a generous stack, and the parsed tree's depth is bounded before it is accepted.
//! A panic inside the evaluator is caught and reported as an expression error.
//!
//! A third bounds the work: CEL has no loops but its comprehensions (`map`, `filter`, `all`,
//! `exists`, `exists_one`), and the evaluator has no budget, so each comprehension nested in
//! another multiplies the work by its list's length — six nested over ten-element lists is a
//! million evaluations, twelve (well within the bracket limit) would never end. Comprehensions
//! may nest [`EXPRESSION_LOOPS_DEPTH_MAX`] deep (decision 0042). Two deep over long lists is
//! still too much, and no bound at check time sees a list's length: what an evaluation does is
//! metered as it runs ([`budget`], decision 0074), and so is the size of what it produces.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, LazyLock};

use cel::common::ast::{EntryExpr, Expr as Ast, IdedExpr};
use serde_json::{Map, Value};

mod budget;
mod reads;

use reads::{Reads, find_reads};

/// CEL's standard library and the budget's meter, built once: `cel::Context::default()` builds
/// it afresh, a tenth of the engine's CPU when every guard, key and template evaluation paid for
/// it.
static STDLIB: LazyLock<Arc<cel::Env>> = LazyLock::new(|| {
    let mut env = cel::Env::stdlib();
    budget::declare(&mut env);
    Arc::new(env)
});

/// Longest expression source accepted, in bytes.
pub const EXPRESSION_BYTES_MAX: usize = 4096;
/// Deepest bracket nesting (`(`, `[`, `{`) accepted in an expression's source.
pub const EXPRESSION_BRACKETS_DEPTH_MAX: usize = 24;
/// Deepest parsed expression tree accepted: evaluation recurses once per level.
pub const EXPRESSION_TREE_DEPTH_MAX: usize = 32;
/// Deepest nesting of comprehensions (`map`, `filter`, `all`, `exists`, `exists_one`) accepted:
/// each level multiplies the work by its list's length. Two is a comparison of every element of
/// one list with every element of another.
pub const EXPRESSION_LOOPS_DEPTH_MAX: usize = 2;
const COMPILE_STACK_BYTES: usize = 64 << 20;
/// The stack a thread evaluating expressions needs: the evaluator recurses once per level of the
/// tree, and the budget's charges make two levels of one ([`budget`]). The deepest accepted
/// expression evaluates within it, even in a debug build; a thread's default (2 MiB) is not
/// enough there, so the threads running steps and intake are given this.
pub const EVALUATION_STACK_BYTES: usize = 8 << 20;
/// Units the expressions of one step may spend, by default (`sutra.expressions.max-cost`): about
/// a value cell or a loop's iteration each, a million being half a second of one core at most.
pub const EXPRESSION_COST_DEFAULT: u64 = 1_000_000;
/// The largest value one expression may produce, by default, in bytes of JSON
/// (`sutra.expressions.max-value-bytes`).
pub const EXPRESSION_VALUE_BYTES_DEFAULT: usize = 1 << 20;

/// The names an expression over an instance may use.
pub const INSTANCE_ROOTS: &[&str] = &["vars", "msg", "instance", "now"];
/// The names a channel's `correlate` expression may use: the message's attributes.
pub const MESSAGE_ROOTS: &[&str] = &["data", "id", "type", "source", "subject", "time"];

/// A compiled CEL expression. Cheap to clone.
#[derive(Clone)]
pub struct Expr {
    source: Arc<str>,
    /// The parsed tree with its budget's charges in it ([`budget::meter`]).
    tree: Arc<IdedExpr>,
    /// What it reads of each free name ([`Reads`]): an evaluation binds only that.
    reads: Arc<BTreeMap<String, Reads>>,
}

impl std::fmt::Debug for Expr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Expr({:?})", self.source)
    }
}

/// Why an expression did not compile.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CompileError {
    #[error("expression is empty")]
    Empty,
    #[error("expression is {0} bytes long; the limit is {EXPRESSION_BYTES_MAX}")]
    TooLong(usize),
    #[error(
        "expression nests too deeply (more than {EXPRESSION_BRACKETS_DEPTH_MAX} brackets or {EXPRESSION_TREE_DEPTH_MAX} operators deep)"
    )]
    TooDeep,
    #[error(
        "expression nests `map`, `filter`, `all`, `exists` or `exists_one` more than {EXPRESSION_LOOPS_DEPTH_MAX} deep, which multiplies the work at every level"
    )]
    LoopsTooDeep,
    #[error("{0}")]
    Syntax(String),
    #[error("unknown name `{name}`: expressions here can use {allowed}")]
    UnknownName { name: String, allowed: String },
}

/// Where a syntax error is and what the parser objected to, without the CEL parser's echo of the
/// source and its list of expected tokens (noise to someone writing a guard).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyntaxDetail {
    /// 1-based, in the trimmed source.
    pub line: usize,
    /// 1-based, in chars.
    pub column: usize,
    pub reason: String,
}

impl CompileError {
    /// The position and plain reason of a syntax error, when the parser gave them.
    pub fn syntax_detail(&self) -> Option<SyntaxDetail> {
        let CompileError::Syntax(message) = self else {
            return None;
        };
        // The parser writes `ERROR: <input>:LINE:COLUMN: Syntax error: REASON`, then an excerpt.
        let first = message.lines().next()?.strip_prefix("ERROR: <input>:")?;
        let mut parts = first.splitn(3, ':');
        let line = parts.next()?.parse().ok()?;
        let column = parts.next()?.parse().ok()?;
        let reason = parts.next()?.trim();
        let reason = reason.strip_prefix("Syntax error: ").unwrap_or(reason);
        Some(SyntaxDetail {
            line,
            column,
            reason: plain_reason(reason),
        })
    }
}

/// Rewords the parser generator's phrases.
fn plain_reason(reason: &str) -> String {
    let reason = reason.split(" expecting ").next().unwrap_or(reason);
    let quoted = |token: &str| {
        let token = token.strip_prefix('\'').unwrap_or(token);
        format!("`{}`", token.strip_suffix('\'').unwrap_or(token))
    };
    if let Some(input) = reason
        .strip_prefix("mismatched input ")
        .or_else(|| reason.strip_prefix("extraneous input "))
    {
        return match input {
            "'<EOF>'" => "the expression ends too early".into(),
            token => format!("unexpected {}", quoted(token)),
        };
    }
    if let Some(input) = reason.strip_prefix("no viable alternative at input ") {
        return format!("cannot make sense of {}", quoted(input));
    }
    if let Some(input) = reason.strip_prefix("token recognition error at: ") {
        return format!("unrecognised text {}", quoted(input));
    }
    reason.to_owned()
}

/// The longest correlation key (a message's, a `receive`'s) and CloudEvents attribute taken, in
/// bytes: they become keys of the store's indexes, whose entries PostgreSQL caps near 2.7 kB.
pub const KEY_BYTES_MAX: usize = 1024;

/// Why an expression failed at run time.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{expression}`: {message}")]
pub struct EvalError {
    pub expression: String,
    pub message: String,
    pub fault: EvalFault,
}

/// What kind of failure: the instance's data, or the budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EvalFault {
    /// `SUTRA.RUNTIME.EXPRESSION.ERROR`: a missing field, a wrong type.
    Failed,
    /// `SUTRA.RUNTIME.EXPRESSION.BUDGET`: too much work, or too large a value.
    OverBudget,
}

impl EvalError {
    pub fn failed(expression: &str, message: impl Into<String>) -> EvalError {
        EvalError {
            expression: expression.to_owned(),
            message: message.into(),
            fault: EvalFault::Failed,
        }
    }

    fn over_budget(expression: &str, message: impl Into<String>) -> EvalError {
        EvalError {
            fault: EvalFault::OverBudget,
            ..EvalError::failed(expression, message)
        }
    }
}

impl Expr {
    /// Compiles `source`, accepting only the free names in `roots`.
    pub fn compile(source: &str, roots: &[&str]) -> Result<Expr, CompileError> {
        let source = source.trim();
        if source.is_empty() {
            return Err(CompileError::Empty);
        }
        if source.len() > EXPRESSION_BYTES_MAX {
            return Err(CompileError::TooLong(source.len()));
        }
        if bracket_depth(source) > EXPRESSION_BRACKETS_DEPTH_MAX {
            return Err(CompileError::TooDeep);
        }
        let program = parse_on_large_stack(source)?;
        let root = program.expression();
        if tree_depth(&root.expr) > EXPRESSION_TREE_DEPTH_MAX {
            return Err(CompileError::TooDeep);
        }
        if loops_depth(&root.expr) > EXPRESSION_LOOPS_DEPTH_MAX {
            return Err(CompileError::LoopsTooDeep);
        }
        // The names it reads are its free names.
        let mut reads = BTreeMap::new();
        find_reads(&root.expr, &mut Vec::new(), &mut reads);
        if let Some(name) = reads
            .keys()
            .find(|name| !roots.contains(&name.as_str()))
            .cloned()
        {
            let allowed = roots
                .iter()
                .map(|r| format!("`{r}`"))
                .collect::<Vec<_>>()
                .join(", ");
            return Err(CompileError::UnknownName { name, allowed });
        }
        Ok(Expr {
            source: source.into(),
            tree: Arc::new(budget::meter(root)),
            reads: Arc::new(reads),
        })
    }

    pub fn source(&self) -> &str {
        &self.source
    }

    /// Evaluates the expression with the given names bound, and converts the result to JSON.
    /// CEL timestamps become RFC 3339 strings and durations become nanoseconds. The work is
    /// charged to the bindings' budget, and the result may be no larger than theirs.
    pub fn eval(&self, bindings: &Bindings) -> Result<Value, EvalError> {
        let error = |message: String| EvalError::failed(&self.source, message);
        let mut context = cel::Context::with_env(Arc::clone(&STDLIB));
        for (name, value) in &bindings.values {
            if let Some(reads) = self.reads.get(*name) {
                context.add_variable_from_value(*name, value.to_cel(reads));
            }
        }
        let units = bindings.spend.map_or(EXPRESSION_COST_DEFAULT, Cell::get);
        let (outcome, left, exhausted) = budget::metered(units, || {
            catch_unwind(AssertUnwindSafe(|| {
                cel::Value::resolve(&self.tree, &context)
            }))
        });
        if let Some(spend) = bindings.spend {
            spend.set(left);
        }
        if exhausted {
            return Err(EvalError::over_budget(
                &self.source,
                "the expressions of this step did more work than `sutra.expressions.max-cost` allows",
            ));
        }
        let value = match outcome {
            Ok(Ok(value)) => value,
            Ok(Err(e)) => return Err(error(describe_execution_error(&e))),
            Err(_) => {
                return Err(error(
                    "the expression evaluator failed on this input".into(),
                ));
            }
        };
        if !budget::json_bytes_within(&value, bindings.value_bytes) {
            return Err(EvalError::over_budget(
                &self.source,
                format!(
                    "the result is larger than {} bytes (`sutra.expressions.max-value-bytes`)",
                    bindings.value_bytes
                ),
            ));
        }
        let value = value
            .json()
            .map_err(|e| error(format!("the result cannot be represented as JSON: {e}")))?;
        if crate::storable::holds_nul(&value) {
            return Err(error(
                "the result holds the character \\u0000 (NUL), which cannot be stored".into(),
            ));
        }
        Ok(value)
    }

    /// Evaluates a guard: the result must be a boolean.
    pub fn eval_bool(&self, bindings: &Bindings) -> Result<bool, EvalError> {
        match self.eval(bindings)? {
            Value::Bool(b) => Ok(b),
            other => Err(EvalError::failed(
                &self.source,
                format!("expected a boolean, got {}", json_type_name(&other)),
            )),
        }
    }

    /// Evaluates a correlation key: a string, or an integer written in decimal.
    pub fn eval_key(&self, bindings: &Bindings) -> Result<String, EvalError> {
        let refused = |message: String| EvalError::failed(&self.source, message);
        let key = match self.eval(bindings)? {
            Value::String(s) => s,
            Value::Number(n) if n.is_i64() || n.is_u64() => n.to_string(),
            other => {
                return Err(refused(format!(
                    "a correlation key must be a string or an integer, got {}",
                    json_type_name(&other)
                )));
            }
        };
        if key.len() > KEY_BYTES_MAX {
            return Err(refused(format!(
                "a correlation key is at most {KEY_BYTES_MAX} bytes long; this one is {}",
                key.len()
            )));
        }
        Ok(key)
    }
}

/// The names bound for one evaluation, borrowed: each expression converts only what it reads of
/// them ([`Reads`]); and its budget.
pub struct Bindings<'a> {
    values: Vec<(&'a str, Binding<'a>)>,
    /// The units left to the step the evaluation is part of; an evaluation of its own has
    /// [`EXPRESSION_COST_DEFAULT`].
    spend: Option<&'a Cell<u64>>,
    value_bytes: usize,
}

impl Default for Bindings<'_> {
    fn default() -> Self {
        Bindings {
            values: Vec::new(),
            spend: None,
            value_bytes: EXPRESSION_VALUE_BYTES_DEFAULT,
        }
    }
}

enum Binding<'a> {
    Json(&'a Value),
    Object(&'a Map<String, Value>),
    Timestamp(jiff::Timestamp),
}

impl<'a> Bindings<'a> {
    pub fn new() -> Bindings<'a> {
        Bindings::default()
    }

    /// Charges the evaluation to `spend`, the units its step has left, and bounds its result at
    /// `value_bytes` of JSON.
    pub fn metered(mut self, spend: &'a Cell<u64>, value_bytes: usize) -> Bindings<'a> {
        self.spend = Some(spend);
        self.value_bytes = value_bytes;
        self
    }

    /// Binds `name` to a JSON value.
    pub fn json(mut self, name: &'a str, value: &'a Value) -> Bindings<'a> {
        self.values.push((name, Binding::Json(value)));
        self
    }

    /// Binds `name` to a JSON object.
    pub fn object(mut self, name: &'a str, object: &'a Map<String, Value>) -> Bindings<'a> {
        self.values.push((name, Binding::Object(object)));
        self
    }

    /// Binds `name` to a CEL timestamp.
    pub fn timestamp(mut self, name: &'a str, at: jiff::Timestamp) -> Bindings<'a> {
        self.values.push((name, Binding::Timestamp(at)));
        self
    }
}

impl Binding<'_> {
    /// The value in CEL's form, as far as `reads` reaches into it.
    fn to_cel(&self, reads: &Reads) -> cel::Value {
        match self {
            Binding::Json(value) => reads.of(value),
            Binding::Object(object) => reads.of_object(object),
            Binding::Timestamp(at) => {
                let at = chrono::DateTime::from_timestamp_nanos(
                    i64::try_from(at.as_nanosecond()).unwrap_or(i64::MAX),
                );
                cel::Value::Timestamp(at.fixed_offset())
            }
        }
    }
}

fn describe_execution_error(error: &cel::ExecutionError) -> String {
    match error {
        cel::ExecutionError::NoSuchKey(key) => format!("no such key `{key}`"),
        cel::ExecutionError::UndeclaredReference(name) => format!("`{name}` is not defined here"),
        other => other.to_string(),
    }
}

pub(crate) fn json_type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a map",
    }
}

fn bracket_depth(source: &str) -> usize {
    let (mut depth, mut deepest) = (0usize, 0usize);
    for c in source.chars() {
        match c {
            '(' | '[' | '{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            ')' | ']' | '}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

fn parse_on_large_stack(source: &str) -> Result<cel::Program, CompileError> {
    std::thread::scope(|scope| {
        let parse = std::thread::Builder::new()
            .name("sutra-cel-parse".into())
            .stack_size(COMPILE_STACK_BYTES)
            .spawn_scoped(scope, || {
                catch_unwind(|| cel::Program::compile(source))
                    .map_err(|_| CompileError::Syntax("the expression parser failed".into()))?
                    .map_err(|e| CompileError::Syntax(e.to_string()))
            })
            .map_err(|e| CompileError::Syntax(format!("cannot start the parser: {e}")))?;
        parse
            .join()
            .unwrap_or_else(|_| Err(CompileError::Syntax("the expression parser failed".into())))
    })
}

fn children(expr: &Ast) -> Vec<&Ast> {
    match expr {
        Ast::Unspecified | Ast::Ident(_) | Ast::Literal(_) => vec![],
        Ast::Call(call) => call
            .target
            .iter()
            .map(|t| &t.expr)
            .chain(call.args.iter().map(|a| &a.expr))
            .collect(),
        Ast::Comprehension(c) => vec![
            &c.iter_range.expr,
            &c.accu_init.expr,
            &c.loop_cond.expr,
            &c.loop_step.expr,
            &c.result.expr,
        ],
        Ast::List(list) => list.elements.iter().map(|e| &e.expr).collect(),
        Ast::Map(map) => map
            .entries
            .iter()
            .flat_map(|e| entry_children(&e.expr))
            .collect(),
        Ast::Struct(s) => s
            .entries
            .iter()
            .flat_map(|e| entry_children(&e.expr))
            .collect(),
        Ast::Select(select) => vec![&select.operand.expr],
    }
}

fn entry_children(entry: &EntryExpr) -> Vec<&Ast> {
    match entry {
        EntryExpr::StructField(field) => vec![&field.value.expr],
        EntryExpr::MapEntry(entry) => vec![&entry.key.expr, &entry.value.expr],
    }
}

/// The tree's depth, computed without recursion so that a deep tree cannot overflow here either.
fn tree_depth(root: &Ast) -> usize {
    let mut deepest = 0;
    let mut stack = vec![(root, 1usize)];
    while let Some((expr, depth)) = stack.pop() {
        deepest = deepest.max(depth);
        stack.extend(children(expr).into_iter().map(|child| (child, depth + 1)));
    }
    deepest
}

/// How deep comprehensions nest in the tree: a comprehension's list and initial value are
/// evaluated once, outside its loop; its condition, step and result inside it. Without
/// recursion, like [`tree_depth`].
fn loops_depth(root: &Ast) -> usize {
    let mut deepest = 0;
    let mut stack = vec![(root, 0usize)];
    while let Some((expr, loops)) = stack.pop() {
        deepest = deepest.max(loops);
        match expr {
            Ast::Comprehension(c) => {
                stack.push((&c.iter_range.expr, loops));
                stack.push((&c.accu_init.expr, loops));
                for inner in [&c.loop_cond, &c.loop_step, &c.result] {
                    stack.push((&inner.expr, loops + 1));
                }
            }
            other => stack.extend(children(other).into_iter().map(|child| (child, loops))),
        }
    }
    deepest
}

/// A YAML value in which every string leaf starting with `=` is an expression. `==` at the start
/// escapes a literal `=`.
#[derive(Debug, Clone)]
pub enum Template {
    /// A subtree with no expression in it, kept as one JSON value.
    Literal(Value),
    Expr(Expr),
    List(Vec<Template>),
    Map(Vec<(String, Template)>),
}

impl Template {
    /// Renders the template. Map keys keep their document order.
    pub fn render(&self, bindings: &Bindings) -> Result<Value, EvalError> {
        Ok(match self {
            Template::Literal(value) => value.clone(),
            Template::Expr(expr) => expr.eval(bindings)?,
            Template::List(items) => Value::Array(
                items
                    .iter()
                    .map(|t| t.render(bindings))
                    .collect::<Result<_, _>>()?,
            ),
            Template::Map(entries) => Value::Object(
                entries
                    .iter()
                    .map(|(k, t)| Ok((k.clone(), t.render(bindings)?)))
                    .collect::<Result<_, EvalError>>()?,
            ),
        })
    }

    /// Every expression in the template, in document order.
    pub fn expressions(&self) -> Vec<&Expr> {
        match self {
            Template::Literal(_) => vec![],
            Template::Expr(expr) => vec![expr],
            Template::List(items) => items.iter().flat_map(Template::expressions).collect(),
            Template::Map(entries) => entries.iter().flat_map(|(_, t)| t.expressions()).collect(),
        }
    }
}

/// How a string leaf of a template reads.
pub enum Leaf<'a> {
    Literal(String),
    Expression(&'a str),
}

/// Classifies a template's string leaf: `=expr` is an expression, `==text` is the literal `=text`.
pub fn classify_leaf(text: &str) -> Leaf<'_> {
    match text.strip_prefix('=') {
        Some(rest) if rest.starts_with('=') => Leaf::Literal(rest.to_owned()),
        Some(rest) => Leaf::Expression(rest),
        None => Leaf::Literal(text.to_owned()),
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod budget_tests;
