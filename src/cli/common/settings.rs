//! Global options, merged with the config file: flags win, then environment, then file.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{Args, ValueEnum};
use serde::Deserialize;

use crate::cli::common::exit::{InvalidConfig, UsageError};
use crate::cli::common::limits;
use crate::model::text::escape_control;
use crate::model::{HealthThresholds, StreamProfile};
use crate::ops::PipelineRebuild;
use crate::store::mongo::{ConnectionString, MongoSettings};
use crate::store::Namespace;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum OutputFormat {
    #[default]
    Table,
    Json,
}

/// Where the cluster is: the options of the commands that connect. Its `Debug` shows
/// the URI redacted.
#[derive(Debug, Clone, Args, Default)]
pub struct ClusterArgs {
    /// The cluster, e.g. mongodb://host1,host2/?replicaSet=rs0 (passwords are never
    /// printed) [env: STREAMWARD_URI; config: uri].
    #[arg(long)]
    pub uri: Option<ConnectionString>,
    /// Where the leases live, as DB.COLLECTION [default: streamward.leases].
    #[arg(long, value_name = "DB.COLL")]
    pub leases: Option<Namespace>,
    /// How long to look for a reachable server before giving up (at most 1h) [default: 5s].
    #[arg(long, value_parser = limits::connect_timeout, value_name = "DURATION")]
    pub connect_timeout: Option<Duration>,
}

/// `--output`: the commands that print a result a program may read.
#[derive(Debug, Clone, Args, Default)]
pub struct OutputArgs {
    /// table for people; json for programs: one JSON document on stdout, an object
    /// {"error": …} when the command fails.
    #[arg(long, value_enum, value_name = "FORMAT")]
    pub output: Option<OutputFormat>,
}

/// Who acts and whether acting is allowed: the commands that can write.
#[derive(Debug, Clone, Args, Default)]
pub struct ActorArgs {
    /// Make no writes anywhere: actions are refused (exit 3), the console offers none.
    #[arg(long)]
    pub read_only: bool,
    /// Who is acting, for the audit record [default: user@host] (at most 256 characters).
    #[arg(long, value_parser = limits::name)]
    pub operator: Option<String>,
}

/// `--metrics`: the commands that run listeners in this process.
#[derive(Debug, Clone, Args, Default)]
pub struct MetricsArgs {
    /// Serve the in-process listeners' metrics at http://HOST:PORT/metrics
    /// (docs/metrics.md), e.g. 127.0.0.1:9717.
    #[arg(long, value_name = "HOST:PORT")]
    pub metrics: Option<String>,
}

/// `--config`: every command that reads settings.
#[derive(Debug, Clone, Args, Default)]
pub struct ConfigArgs {
    /// Config file [default: ./streamward.toml if present].
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
}

/// The options of a command that reads a cluster and prints a result: `leases`,
/// `oplog`, `audit`.
#[derive(Debug, Clone, Args, Default)]
pub struct ReaderArgs {
    #[command(flatten)]
    pub cluster: ClusterArgs,
    #[command(flatten)]
    pub output: OutputArgs,
    #[command(flatten)]
    pub config: ConfigArgs,
}

/// The options of a guarded action: a reader's, and who acts.
#[derive(Debug, Clone, Args, Default)]
pub struct ActingArgs {
    #[command(flatten)]
    pub cluster: ClusterArgs,
    #[command(flatten)]
    pub output: OutputArgs,
    #[command(flatten)]
    pub actor: ActorArgs,
    #[command(flatten)]
    pub config: ConfigArgs,
}

/// What the command line said, before and after the command's name merged: the
/// input of [`Settings::resolve`]. Its `Debug` shows the URI redacted.
#[derive(Debug, Clone, Default)]
pub struct GlobalArgs {
    pub uri: Option<ConnectionString>,
    pub leases: Option<Namespace>,
    pub config: Option<PathBuf>,
    pub output: Option<OutputFormat>,
    pub read_only: bool,
    pub operator: Option<String>,
    pub connect_timeout: Option<Duration>,
    /// Whether `--uri` was typed on the command line (not taken from the environment
    /// or the config file), for commands that must refuse a cluster.
    pub uri_on_command_line: bool,
}

impl GlobalArgs {
    /// Options typed after the command's name win over the same typed before it.
    pub fn cluster(&mut self, args: &ClusterArgs) {
        if args.uri.is_some() {
            self.uri.clone_from(&args.uri);
        }
        if args.leases.is_some() {
            self.leases.clone_from(&args.leases);
        }
        self.connect_timeout = args.connect_timeout.or(self.connect_timeout);
        self.uri_on_command_line = self.uri.is_some();
    }

    pub fn output(&mut self, args: &OutputArgs) {
        self.output = args.output.or(self.output);
    }

    pub fn actor(&mut self, args: &ActorArgs) {
        self.read_only |= args.read_only;
        if args.operator.is_some() {
            self.operator.clone_from(&args.operator);
        }
    }

    pub fn config(&mut self, args: &ConfigArgs) {
        if args.config.is_some() {
            self.config.clone_from(&args.config);
        }
    }

    pub fn reader(&mut self, args: &ReaderArgs) {
        self.cluster(&args.cluster);
        self.output(&args.output);
        self.config(&args.config);
    }

    pub fn acting(&mut self, args: &ActingArgs) {
        self.cluster(&args.cluster);
        self.output(&args.output);
        self.actor(&args.actor);
        self.config(&args.config);
    }
}

/// The config file's keys; every one optional. Its `Debug` shows the URI redacted.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigFile {
    pub uri: Option<ConnectionString>,
    pub leases: Option<String>,
    pub output: Option<OutputFormat>,
    pub read_only: Option<bool>,
    pub operator: Option<String>,
    pub connect_timeout: Option<String>,
    pub thresholds: Option<ThresholdsFile>,
    /// The console's theme: a built-in name or one in the user theme directory.
    pub theme: Option<String>,
    /// `[rebuilds.NAME]`: attached rebuild definitions.
    pub rebuilds: Option<BTreeMap<String, RebuildFile>>,
    /// Which kind of change streams the cluster offers: "mongodb" or "cosmos" (Azure
    /// Cosmos DB for MongoDB). Unset: told by the host names (docs/cosmos.md).
    pub profile: Option<String>,
}

/// `[rebuilds.NAME]`: an aggregation pipeline ending in `$merge` that rebuilds the
/// derived data of the listener resource `resource`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RebuildFile {
    /// The lease the rebuild takes with kind bulk.
    pub resource: String,
    /// Where the pipeline runs.
    pub db: String,
    pub collection: String,
    /// Extended JSON array of stages, the last one `$merge`.
    pub pipeline: String,
    /// Upper bound of the run, e.g. "30m" (default 1h).
    pub timeout: Option<String>,
}

/// A rebuild definition from the config file, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct RebuildConfig {
    pub resource: String,
    pub definition: PipelineRebuild,
}

/// `[thresholds]`: where the status rules draw their lines.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ThresholdsFile {
    /// Lag above this is BEHIND, e.g. "60s".
    pub behind_after: Option<String>,
    /// A lease whose time to loss may end sooner than this is AT RISK, e.g. "30m".
    pub at_risk_within: Option<String>,
    /// Without a time to loss and with the oplog full: headroom below this share of the
    /// window is AT RISK, 0.0 to 1.0.
    pub at_risk_share: Option<f64>,
    /// A caught-up lease whose stream had no entry for this long is IDLE, e.g. "30s".
    pub quiet_after: Option<String>,
    /// A lease free for the taking this long that nobody took is UNCLAIMED, e.g. "30s".
    pub unclaimed_after: Option<String>,
    /// A lease whose listeners failed this many times on one change is FAILING.
    pub failing_after: Option<u32>,
}

impl ConfigFile {
    /// Reads `explicit`, or `./streamward.toml` when it exists. A file that does not
    /// parse is an error naming the file and line, never a silent fallback.
    pub fn load(explicit: Option<&Path>) -> anyhow::Result<(ConfigFile, Option<PathBuf>)> {
        let path = match explicit {
            Some(path) => path.to_path_buf(),
            None => {
                let default = PathBuf::from("streamward.toml");
                if !default.exists() {
                    return Ok((ConfigFile::default(), None));
                }
                default
            }
        };
        let text = std::fs::read_to_string(&path).map_err(|e| {
            anyhow::Error::new(UsageError(format!(
                "cannot read config file {}: {e}",
                path.display()
            )))
        })?;
        let config = Self::parse(&text).map_err(|e| {
            anyhow::Error::new(InvalidConfig {
                path: escape_control(&path.display().to_string()),
                detail: e.to_string().trim_end().to_string(),
            })
        })?;
        Ok((config, Some(path)))
    }

    pub fn parse(text: &str) -> Result<ConfigFile, toml::de::Error> {
        toml::from_str(text)
    }
}

/// Everything a command needs to know, resolved. Its `Debug` shows the URI redacted.
#[derive(Debug, Clone)]
pub struct Settings {
    pub uri: Option<ConnectionString>,
    pub leases: Namespace,
    pub output: OutputFormat,
    pub read_only: bool,
    pub operator: String,
    pub connect_timeout: Duration,
    pub thresholds: HealthThresholds,
    pub theme: Option<String>,
    pub rebuilds: BTreeMap<String, RebuildConfig>,
    /// The configured stream profile; `None`: the host names tell.
    pub profile: Option<StreamProfile>,
}

impl Settings {
    pub fn resolve(args: &GlobalArgs) -> anyhow::Result<Settings> {
        let (file, path) = ConfigFile::load(args.config.as_deref())?;
        let invalid = |what: String| {
            let place = path
                .as_ref()
                .map(|p| format!(" in {}", p.display()))
                .unwrap_or_default();
            anyhow::Error::new(UsageError(format!("{what}{place}")))
        };
        let leases = match (&args.leases, &file.leases) {
            (Some(ns), _) => ns.clone(),
            (None, Some(text)) => text
                .parse()
                .map_err(|e: String| invalid(format!("leases: {e}")))?,
            (None, None) => MongoSettings::default().leases,
        };
        let connect_timeout = match (args.connect_timeout, &file.connect_timeout) {
            (Some(d), _) => d,
            (None, Some(text)) => limits::connect_timeout(text)
                .map_err(|e| invalid(format!("connect_timeout {text:?}: {e}")))?,
            (None, None) => MongoSettings::DEFAULT_SERVER_SELECTION_TIMEOUT,
        };
        let mut thresholds = HealthThresholds::default();
        if let Some(t) = &file.thresholds {
            let duration = |key: &str, text: &String| {
                humantime::parse_duration(text)
                    .map_err(|e| invalid(format!("thresholds.{key} {text:?}: {e}")))
            };
            if let Some(text) = &t.behind_after {
                thresholds.behind_after = duration("behind_after", text)?;
            }
            if let Some(text) = &t.at_risk_within {
                // Past a year the horizon says nothing a prediction can keep to.
                thresholds.at_risk_within =
                    limits::duration_at_most(text, Duration::from_secs(366 * 86_400))
                        .map_err(|e| invalid(format!("thresholds.at_risk_within {text:?}: {e}")))?;
            }
            if let Some(text) = &t.quiet_after {
                thresholds.quiet_after = duration("quiet_after", text)?;
            }
            if let Some(text) = &t.unclaimed_after {
                thresholds.unclaimed_after = duration("unclaimed_after", text)?;
            }
            if let Some(attempts) = t.failing_after {
                if attempts == 0 {
                    return Err(invalid(
                        "thresholds.failing_after must be at least 1 (attempts on one change)"
                            .to_string(),
                    ));
                }
                thresholds.failing_after = attempts;
            }
            if let Some(share) = t.at_risk_share {
                if !(0.0..=1.0).contains(&share) {
                    return Err(invalid(format!(
                        "thresholds.at_risk_share must be between 0 and 1, got {share}"
                    )));
                }
                thresholds.at_risk_share = share;
            }
        }
        let mut rebuilds = BTreeMap::new();
        for (name, r) in file.rebuilds.iter().flatten() {
            let limit = match &r.timeout {
                Some(text) => limits::rebuild_timeout(text)
                    .map_err(|e| invalid(format!("rebuilds.{name}.timeout {text:?}: {e}")))?,
                None => PipelineRebuild::DEFAULT_LIMIT,
            };
            let definition = PipelineRebuild::parse(
                Namespace::new(r.db.clone(), r.collection.clone()),
                &r.pipeline,
                limit,
            )
            .map_err(|e| invalid(format!("rebuilds.{name}.pipeline: {e}")))?;
            rebuilds.insert(
                name.clone(),
                RebuildConfig {
                    resource: r.resource.clone(),
                    definition,
                },
            );
        }
        let profile = match &file.profile {
            Some(name) => Some(
                name.parse::<StreamProfile>()
                    .map_err(|e| invalid(format!("profile: {e}")))?,
            ),
            None => None,
        };
        Ok(Settings {
            profile,
            rebuilds,
            thresholds,
            theme: file.theme,
            uri: args
                .uri
                .clone()
                .or_else(|| {
                    std::env::var(URI_ENV)
                        .ok()
                        .filter(|uri| !uri.is_empty())
                        .map(ConnectionString::from)
                })
                .or(file.uri),
            leases,
            output: args.output.or(file.output).unwrap_or_default(),
            read_only: args.read_only || file.read_only.unwrap_or(false),
            operator: match (&args.operator, file.operator) {
                (Some(operator), _) => operator.clone(),
                (None, Some(operator)) => {
                    limits::name(&operator).map_err(|e| invalid(format!("operator: {e}")))?
                }
                (None, None) => default_operator(),
            },
            connect_timeout,
        })
    }

    /// Settings for the MongoDB adapter; a missing URI is a usage error that says where to put one.
    pub fn mongo(&self) -> anyhow::Result<MongoSettings> {
        let uri = self.uri.clone().ok_or_else(|| {
            anyhow::Error::new(UsageError(
                "no cluster given: pass --uri, set STREAMWARD_URI, or put uri = \"mongodb://…\" in streamward.toml"
                    .into(),
            ))
        })?;
        let mut settings = MongoSettings::new(uri);
        settings.leases = self.leases.clone();
        settings.server_selection_timeout = self.connect_timeout;
        settings.profile = self.profile;
        Ok(settings)
    }
}

/// Where `--uri` comes from when it is not typed: after the flag, before the config file.
pub const URI_ENV: &str = "STREAMWARD_URI";

/// `user@host`, from the operating system (not `$HOSTNAME`, which shells rarely export).
pub fn default_operator() -> String {
    let user = whoami::username()
        .ok()
        .or_else(|| std::env::var("USER").ok())
        .filter(|user| !user.trim().is_empty())
        .unwrap_or_else(|| "unknown".into());
    let host = whoami::hostname()
        .ok()
        .filter(|host| !host.trim().is_empty())
        .unwrap_or_else(|| "localhost".into());
    // The audit keeps at most NAME_MAX_CHARS; an odd host name must not make every
    // action a usage error.
    let operator = format!("{user}@{host}");
    match limits::name(&operator) {
        Ok(operator) => operator,
        Err(_) => operator.chars().take(limits::NAME_MAX_CHARS).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_operator_is_the_system_user_at_the_system_host() {
        let operator = default_operator();
        let host = whoami::hostname().expect("this system has a host name");
        assert!(operator.ends_with(&format!("@{host}")), "{operator}");
        if let Ok(user) = whoami::username() {
            assert_eq!(operator, format!("{user}@{host}"));
        }
        assert!(!operator.starts_with("unknown@"), "{operator}");
    }

    #[test]
    fn a_bad_config_names_the_line() {
        let error = ConfigFile::parse("uri = \"mongodb://x\"\nleases = 5\n").unwrap_err();
        assert!(error.to_string().contains("line 2"), "{error}");
        let unknown = ConfigFile::parse("urii = \"x\"").unwrap_err();
        assert!(unknown.to_string().contains("urii"), "{unknown}");
    }

    #[test]
    fn flags_win_over_the_file() {
        let dir = std::env::temp_dir().join(format!("streamward-settings-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("c.toml");
        std::fs::write(
            &file,
            "uri = \"mongodb://file\"\nleases = \"ops.locks\"\noutput = \"json\"\n",
        )
        .unwrap();
        let args = GlobalArgs {
            config: Some(file.clone()),
            uri: Some("mongodb://flag".into()),
            ..GlobalArgs::default()
        };
        let settings = Settings::resolve(&args).unwrap();
        assert_eq!(
            settings.uri.as_ref().map(ConnectionString::expose),
            Some("mongodb://flag")
        );
        assert_eq!(settings.leases, Namespace::new("ops", "locks"));
        assert_eq!(settings.output, OutputFormat::Json);
        std::fs::remove_file(file).unwrap();
    }

    #[test]
    fn rebuilds_come_from_the_file_and_are_checked() {
        let dir = std::env::temp_dir().join(format!("streamward-rebuilds-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("r.toml");
        std::fs::write(
            &file,
            "[rebuilds.rollup]\nresource = \"shop.orders\"\ndb = \"shop\"\ncollection = \"orders\"\n\
             pipeline = '[{\"$group\": {\"_id\": \"$status\"}}, {\"$merge\": \"order_counts\"}]'\ntimeout = \"5m\"\n",
        )
        .unwrap();
        let args = GlobalArgs {
            config: Some(file.clone()),
            ..GlobalArgs::default()
        };
        let settings = Settings::resolve(&args).unwrap();
        let rollup = &settings.rebuilds["rollup"];
        assert_eq!(rollup.resource, "shop.orders");
        assert_eq!(rollup.definition.source, Namespace::new("shop", "orders"));
        assert_eq!(rollup.definition.limit, Duration::from_secs(300));
        std::fs::write(
            &file,
            "[rebuilds.bad]\nresource = \"r\"\ndb = \"d\"\ncollection = \"c\"\npipeline = '[{\"$match\": {}}]'\n",
        )
        .unwrap();
        let error = Settings::resolve(&args).unwrap_err().to_string();
        assert!(
            error.contains("rebuilds.bad.pipeline") && error.contains("$merge"),
            "{error}"
        );
        std::fs::remove_file(file).unwrap();
    }

    #[test]
    fn the_profile_comes_from_the_file_and_reaches_the_adapter() {
        let dir = std::env::temp_dir().join(format!("streamward-profile-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("p.toml");
        let args = GlobalArgs {
            config: Some(file.clone()),
            uri: Some("mongodb://db1/".into()),
            ..GlobalArgs::default()
        };
        std::fs::write(&file, "profile = \"cosmos\"\n").unwrap();
        let settings = Settings::resolve(&args).unwrap();
        assert_eq!(settings.profile, Some(StreamProfile::CosmosDb));
        assert_eq!(
            settings.mongo().unwrap().profile,
            Some(StreamProfile::CosmosDb)
        );
        std::fs::write(&file, "uri = \"mongodb://x\"\n").unwrap();
        let unset = Settings::resolve(&args).unwrap();
        assert_eq!(
            unset.mongo().unwrap().profile,
            None,
            "unset: the host names tell"
        );
        std::fs::write(&file, "profile = \"cosmosdb\"\n").unwrap();
        let error = Settings::resolve(&args).unwrap_err().to_string();
        assert!(
            error.contains("profile")
                && error.contains("\"cosmosdb\"")
                && error.contains("expected \"mongodb\" or \"cosmos\"")
                && error.contains("p.toml"),
            "{error}"
        );
        std::fs::remove_file(file).unwrap();
    }

    #[test]
    fn thresholds_come_from_the_file_and_are_checked() {
        let dir =
            std::env::temp_dir().join(format!("streamward-thresholds-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("t.toml");
        std::fs::write(
            &file,
            "[thresholds]\nbehind_after = \"5m\"\nat_risk_share = 0.5\nat_risk_within = \"2h\"\n",
        )
        .unwrap();
        let args = GlobalArgs {
            config: Some(file.clone()),
            ..GlobalArgs::default()
        };
        let settings = Settings::resolve(&args).unwrap();
        assert_eq!(settings.thresholds.behind_after, Duration::from_secs(300));
        assert_eq!(settings.thresholds.at_risk_share, 0.5);
        assert_eq!(
            settings.thresholds.at_risk_within,
            Duration::from_secs(2 * 3600)
        );
        assert_eq!(
            settings.thresholds.quiet_after,
            HealthThresholds::default().quiet_after
        );
        std::fs::write(&file, "[thresholds]\nat_risk_share = 1.5\n").unwrap();
        let error = Settings::resolve(&args).unwrap_err().to_string();
        assert!(
            error.contains("at_risk_share") && error.contains("t.toml"),
            "{error}"
        );
        std::fs::remove_file(file).unwrap();
    }
}

#[cfg(test)]
mod debug_tests {
    use super::*;

    #[test]
    fn debug_never_shows_a_uri_secret() {
        let uri = "mongodb://ann:hunter2@db1/?proxyPassword=pp-secret&authMechanismProperties=AWS_SESSION_TOKEN:tok-secret";
        let args = GlobalArgs {
            uri: Some(uri.into()),
            ..GlobalArgs::default()
        };
        let cluster = ClusterArgs {
            uri: Some(uri.into()),
            ..ClusterArgs::default()
        };
        let file = ConfigFile {
            uri: Some(uri.into()),
            ..ConfigFile::default()
        };
        let mongo = crate::store::mongo::MongoSettings::new(uri);
        for shown in [
            format!("{args:?}"),
            format!("{cluster:?}"),
            format!("{file:?}"),
            format!("{mongo:?}"),
        ] {
            for secret in ["hunter2", "pp-secret", "tok-secret"] {
                assert!(!shown.contains(secret), "{secret} in {shown}");
            }
            assert!(shown.contains("ann:***@db1"), "{shown}");
        }
    }
}
