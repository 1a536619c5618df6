//! `call`: another flow of the deployment runs as an instance of its own (a child), and the
//! calling token waits for it to end (BPMN's call activity; decision 0052).

use serde_json::Value;

use super::{Fault, Outcome, Run};
use crate::codes;
use crate::model::{CallSpec, Node};
use crate::snapshot::Token;

impl Run<'_> {
    /// A token reaches a `call` node: its input is rendered and the child called.
    pub(super) fn call(&mut self, token: &mut Token, node: &Node, spec: &CallSpec) -> Outcome {
        let input = spec.input.render(&self.bindings())?;
        self.call_child(token, node, &spec.flow, input)
    }

    pub(super) fn call_child(
        &mut self,
        _token: &mut Token,
        node: &Node,
        flow: &str,
        _input: Value,
    ) -> Outcome {
        Err(Fault::new(
            codes::NODE_UNKNOWN.code,
            format!("node `{}` calls flow `{flow}`: calls do not run yet", node.id),
        ))
    }
}
