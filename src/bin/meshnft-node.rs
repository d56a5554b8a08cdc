//! `meshnft-node`: the DaemonSet's process (`meshnft-node install`), the
//! installer and the node agent.
fn main() {
    std::process::exit(meshnft_node::main_entry())
}
