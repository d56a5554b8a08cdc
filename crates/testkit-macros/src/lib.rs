//! `#[root_test]`, re-exported by `meshnft-testkit` (`#[support::root_test]`
//! in the integration tests).
//!
//! Most of meshnft's integration tests talk to the kernel (network
//! namespaces, cgroups, nf_tables) and need root. Each used to start with
//! the same three lines; this attribute writes them:
//!
//! ```ignore
//! #[support::root_test]
//! fn add_writes_the_table() { /* body */ }
//! ```
//!
//! expands to a `#[test]` whose body first calls
//! `::meshnft_testkit::root_or_skip("add_writes_the_table")` and returns when
//! it says no (not root: a `SKIP` line on stderr and a record in the file
//! `MESHNFT_SKIP_LOG` names, `meshnft_testkit::skip`; with
//! `MESHNFT_REQUIRE_ROOT=1` it panics instead, which is what CI sets).
//!
//! Written on `proc_macro` alone (no `syn`): it only needs the function's
//! name and its body, the last brace group of the item.

use proc_macro::{Delimiter, Group, Ident, Literal, Punct, Spacing, Span, TokenStream, TokenTree};

/// Marks a test that needs root: see the crate's documentation. Takes no
/// arguments; the item must be a function with a body.
#[proc_macro_attribute]
pub fn root_test(attr: TokenStream, item: TokenStream) -> TokenStream {
    if !attr.is_empty() {
        return error("#[root_test] takes no arguments");
    }
    let mut tokens: Vec<TokenTree> = item.into_iter().collect();
    let name = tokens.windows(2).find_map(|w| match (&w[0], &w[1]) {
        (TokenTree::Ident(f), TokenTree::Ident(n)) if f.to_string() == "fn" => Some(n.to_string()),
        _ => None,
    });
    let Some(name) = name else {
        return error("#[root_test] goes on a function");
    };
    let body = match tokens.pop() {
        Some(TokenTree::Group(g)) if g.delimiter() == Delimiter::Brace => g,
        _ => return error("#[root_test] needs a function with a body"),
    };
    let mut guarded: TokenStream = guard(&name);
    guarded.extend(body.stream());
    let span = body.span();
    let mut body = Group::new(Delimiter::Brace, guarded);
    body.set_span(span);
    let mut out: TokenStream = "#[test]".parse().unwrap_or_default();
    out.extend(tokens);
    out.extend([TokenTree::Group(body)]);
    out
}

/// `if !::meshnft_testkit::root_or_skip("<name>") { return; }`
fn guard(name: &str) -> TokenStream {
    let mut call: TokenStream = "::meshnft_testkit::root_or_skip"
        .parse()
        .unwrap_or_default();
    call.extend([TokenTree::Group(Group::new(
        Delimiter::Parenthesis,
        TokenTree::Literal(Literal::string(name)).into(),
    ))]);
    let mut cond = TokenStream::new();
    cond.extend([
        TokenTree::Ident(Ident::new("if", Span::call_site())),
        TokenTree::Punct(Punct::new('!', Spacing::Alone)),
    ]);
    cond.extend(call);
    cond.extend([TokenTree::Group(Group::new(
        Delimiter::Brace,
        "return;".parse().unwrap_or_default(),
    ))]);
    cond
}

/// A `compile_error!` with `msg`.
fn error(msg: &str) -> TokenStream {
    format!("compile_error!({msg:?});")
        .parse()
        .unwrap_or_default()
}
