//! The system under test of a run, the same for both engines: the null SUT
//! with a QSL of its size, or the QDL connected to the sut-nodes with the
//! data set's QSL.

use std::sync::Arc;

use anyhow::{Context, Result};
use loadgen_engine::null_sut::SizedQsl;
use loadgen_engine::QuerySampleLibrary;
use qdl::Qdl;

use crate::plan::SutPlan;
use crate::progress;
use crate::qsl::DataQsl;

/// What a plan's SUT became.
pub(crate) enum System {
    /// Each engine answers with its own null SUT.
    Null {
        qsl: Arc<SizedQsl>,
        /// Answer like an LLM.
        tokens: bool,
    },
    /// The sessions with every node are open.
    Network { qsl: Arc<DataQsl>, qdl: Box<Qdl> },
}

impl System {
    /// Opens the SUT of `plan`: for sut-nodes, connects to every one,
    /// waiting for those whose backend still loads. `engine` names the
    /// engine in the line that says so.
    pub(crate) fn open(plan: &SutPlan, engine: &str) -> Result<System> {
        match plan {
            SutPlan::Null {
                total,
                performance,
                tokens,
            } => Ok(System::Null {
                qsl: Arc::new(SizedQsl::new(*total, *performance)),
                tokens: *tokens,
            }),
            SutPlan::Network(net) => {
                let qsl = Arc::new(
                    DataQsl::new(net.data.clone(), net.performance_samples)
                        .with_input_codec(net.input_codec),
                );
                eprintln!(
                    "loadgen-node: {engine}; data set {}; connecting to {} sut-node(s)",
                    qsl.name(),
                    net.qdl.nodes.len()
                );
                let qdl = Qdl::connect_when_ready(
                    net.qdl.clone(),
                    qsl.clone(),
                    net.ready_timeout,
                    progress::waiting_for_nodes(),
                )
                .context("cannot reach the sut-nodes")?;
                Ok(System::Network {
                    qsl,
                    qdl: Box::new(qdl),
                })
            }
        }
    }

    /// The QDL, for a run over the network.
    pub(crate) fn qdl(&self) -> Option<&Qdl> {
        match self {
            System::Null { .. } => None,
            System::Network { qdl, .. } => Some(qdl),
        }
    }
}
