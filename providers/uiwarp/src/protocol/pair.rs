//! Two connections brought to RTS in memory, for the crate's own tests and fuzz targets.

use super::{Config, Connection, Event, MemoryTable};
use rdmasock_verbs::QpState;
use std::time::Instant;

/// An initiator and a responder with `config`, brought to RTS by exchanging their handshake
/// (the responder accepts with empty private data).
pub(crate) fn connected_pair(
    config: Config,
    initiator_table: &dyn MemoryTable,
    responder_table: &dyn MemoryTable,
) -> (Connection, Connection) {
    let now = Instant::now();
    let mut initiator =
        Connection::initiator(config.clone(), b"", now).expect("empty private data");
    let mut responder = Connection::responder(config, now);
    let mut wire = Vec::new();
    for _ in 0..8 {
        wire.clear();
        initiator.poll_transmit(initiator_table, &mut wire, usize::MAX);
        responder.handle_input(&wire, responder_table);
        while let Some(e) = responder.poll_event() {
            if let Event::ConnectRequest(_) = e {
                responder.accept(b"", now).expect("accept");
            }
        }
        wire.clear();
        responder.poll_transmit(responder_table, &mut wire, usize::MAX);
        initiator.handle_input(&wire, initiator_table);
        while initiator.poll_event().is_some() {}
    }
    assert_eq!(responder.qp_state(), QpState::ReadyToSend, "the handshake");
    assert_eq!(initiator.qp_state(), QpState::ReadyToSend, "the handshake");
    (initiator, responder)
}
