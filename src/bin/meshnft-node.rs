//! `meshnft-node`: the DaemonSet's process (`meshnft-node install`), the
//! installer and the node agent.

#[global_allocator]
static ALLOCATOR: meshnft_node::Allocator = meshnft_node::Allocator;

fn main() {
    std::process::exit(meshnft_node::main_entry())
}
