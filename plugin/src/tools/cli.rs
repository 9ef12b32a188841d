//! The operator subcommands' one argument parser: the same rules for `env`, `diagnose`,
//! `validate`, `install` and `ready`, on top of `lexopt` (`--opt value` and `--opt=value`,
//! `-o value`, `--` ending the options).
//!
//! - `-h`/`--help` prints the usage to stdout and exits 0 (every parser's loop has the arm
//!   `Short('h') | Long("help") => return Ok(Parsed::Help)`, so that after `env --exec` a
//!   `-h` is the command's own);
//! - an unknown option, a missing or unexpected value, a bad value: one line naming the option,
//!   then the usage, on stderr, exit 2.

use std::ffi::OsString;
use std::fmt;
use std::str::FromStr;

pub(crate) use lexopt::prelude::*;
pub(crate) use lexopt::{Arg, Parser};

/// Exit status of a usage error, as every subcommand documents it.
pub(crate) const USAGE_EXIT: i32 = 2;

/// A usage error: printed with the usage, exit status 2.
#[derive(Debug)]
pub(crate) struct Error(String);

impl Error {
    pub(crate) fn new(message: impl Into<String>) -> Error {
        Error(message.into())
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<lexopt::Error> for Error {
    fn from(err: lexopt::Error) -> Error {
        Error(err.to_string())
    }
}

/// What parsing found: the subcommand's arguments, or a request for its usage.
#[derive(Debug, PartialEq)]
pub(crate) enum Parsed<T> {
    Run(T),
    Help,
}

/// What a subcommand's parser returns.
pub(crate) type Outcome<T> = Result<Parsed<T>, Error>;

/// Parses `args` with `parse`.
pub(crate) fn parse<T>(
    args: &[String],
    parse: impl FnOnce(&mut Parser) -> Outcome<T>,
) -> Outcome<T> {
    parse(&mut Parser::from_args(args.iter().cloned()))
}

/// The subcommand's arguments, or the exit status when there is nothing to run: usage printed
/// (0) or a usage error reported (2). `name` is the subcommand's name for the message.
pub(crate) fn args_or_exit<T>(name: &str, usage: &str, parsed: Outcome<T>) -> Result<T, i32> {
    match parsed {
        Ok(Parsed::Run(args)) => Ok(args),
        Ok(Parsed::Help) => {
            print!("{}", with_newline(usage));
            Err(0)
        }
        Err(err) => {
            eprint!("roce-ipvlan {name}: {err}\n\n{}", with_newline(usage));
            Err(USAGE_EXIT)
        }
    }
}

fn with_newline(text: &str) -> String {
    if text.ends_with('\n') {
        text.to_owned()
    } else {
        format!("{text}\n")
    }
}

/// An option's value as text, named in the error if it is not UTF-8.
pub(crate) fn string(parser: &mut Parser) -> Result<String, Error> {
    Ok(parser.value()?.string()?)
}

/// An option's value parsed as `T`; the error names the option and the value.
pub(crate) fn parsed<T>(parser: &mut Parser, option: &str) -> Result<T, Error>
where
    T: FromStr,
{
    let text = string(parser)?;
    text.parse()
        .map_err(|_| Error(format!("invalid value {text:?} for option '{option}'")))
}

/// An option's value that must be one of `choices` (as `--format shell|json`).
pub(crate) fn choice<T: Copy>(
    parser: &mut Parser,
    option: &str,
    choices: &[(&str, T)],
) -> Result<T, Error> {
    let text = string(parser)?;
    choices
        .iter()
        .find(|(name, _)| *name == text)
        .map(|(_, value)| *value)
        .ok_or_else(|| {
            let names: Vec<&str> = choices.iter().map(|(name, _)| *name).collect();
            Error(format!(
                "invalid value {text:?} for option '{option}': use {}",
                names.join(", ")
            ))
        })
}

/// Every argument left (the rest of the command line, options of a command to run included),
/// without one leading `--`.
pub(crate) fn rest(parser: &mut Parser) -> Result<Vec<String>, Error> {
    let mut rest: Vec<OsString> = parser.raw_args()?.collect();
    if rest.first().is_some_and(|a| a == "--") {
        rest.remove(0);
    }
    rest.into_iter()
        .map(|a| {
            a.into_string()
                .map_err(|a| Error(format!("argument {a:?} is not valid UTF-8")))
        })
        .collect()
}

/// The error for an argument `parse` does not know.
pub(crate) fn unexpected(arg: lexopt::Arg<'_>) -> Error {
    arg.unexpected().into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    /// `--to DIR`, `--count N`, `--flag`, and files.
    #[derive(Debug, Clone, Default, PartialEq)]
    struct Example {
        to: Option<String>,
        count: Option<u32>,
        flag: bool,
        files: Vec<String>,
    }

    fn example(list: &[&str]) -> Outcome<Example> {
        parse(&args(list), |p| {
            let mut e = Example::default();
            while let Some(arg) = p.next()? {
                match arg {
                    Long("to") => e.to = Some(string(p)?),
                    Long("count") | Short('c') => e.count = Some(parsed(p, "--count")?),
                    Long("flag") => e.flag = true,
                    Short('h') | Long("help") => return Ok(Parsed::Help),
                    Value(v) => e.files.push(v.string()?),
                    arg => return Err(unexpected(arg)),
                }
            }
            Ok(Parsed::Run(e))
        })
    }

    #[test]
    fn both_spellings_of_a_value() {
        let want = Example {
            to: Some("/x".into()),
            count: Some(3),
            ..Example::default()
        };
        for list in [
            &["--to", "/x", "--count", "3"][..],
            &["--to=/x", "--count=3"],
            &["--to=/x", "-c", "3"],
            &["--to", "/x", "-c3"],
        ] {
            assert_eq!(
                example(list).unwrap(),
                Parsed::Run(want.clone()),
                "{list:?}"
            );
        }
    }

    #[test]
    fn help_anywhere_before_dashes() {
        assert_eq!(example(&["--to", "/x", "--help"]).unwrap(), Parsed::Help);
        assert_eq!(example(&["-h"]).unwrap(), Parsed::Help);
        let Parsed::Run(e) = example(&["--", "--help"]).unwrap() else {
            panic!("a --help after -- is a file name");
        };
        assert_eq!(e.files, ["--help"]);
    }

    #[test]
    fn errors_name_the_option() {
        let message = |list: &[&str]| example(list).unwrap_err().to_string();
        assert!(message(&["--bogus"]).contains("'--bogus'"));
        assert!(message(&["--to"]).contains("'--to'"));
        assert!(message(&["--count", "x"]).contains("\"x\" for option '--count'"));
        assert!(message(&["--flag=yes"]).contains("'--flag'"));
    }

    #[test]
    fn rest_keeps_the_commands_own_options() {
        let run = |list: &[&str]| {
            parse(&args(list), |p| {
                let mut before = Vec::new();
                while let Some(arg) = p.next()? {
                    match arg {
                        Long("exec") => return Ok(Parsed::Run((before, rest(p)?))),
                        Short('h') | Long("help") => return Ok(Parsed::Help),
                        Long(o) => before.push(o.to_owned()),
                        arg => return Err(unexpected(arg)),
                    }
                }
                Ok(Parsed::Run((before, Vec::new())))
            })
            .unwrap()
        };
        assert_eq!(
            run(&["--a", "--exec", "--", "cmd", "--b", "--", "x"]),
            Parsed::Run((vec!["a".to_owned()], args(&["cmd", "--b", "--", "x"])))
        );
        assert_eq!(
            run(&["--exec", "cmd", "-h"]),
            Parsed::Run((vec![], args(&["cmd", "-h"])))
        );
    }
}
