// Command gen writes pileup's Grafana dashboards (deploy/grafana/*.json)
// from this one source, and checks them: `go run . -out ..` writes them,
// `go run . -check ..` fails when a file differs from what this source
// makes, or when the file does not strictly unmarshal into the Grafana
// dashboard schema and validate against it.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/cog/plugins"
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
	"github.com/grafana/grafana-foundation-sdk/go/stat"
	"github.com/grafana/grafana-foundation-sdk/go/table"
	"github.com/grafana/grafana-foundation-sdk/go/timeseries"
)

// Every panel and variable reads the data source chosen in `datasource`.
var ds = common.DataSourceRef{Type: cog.ToPtr("prometheus"), Uid: cog.ToPtr("${datasource}")}

func query(expr, legend string) *prometheus.DataqueryBuilder {
	return prometheus.NewDataqueryBuilder().Expr(expr).LegendFormat(legend).Datasource(ds)
}

func graph(title, desc, unit string, w uint32, queries ...*prometheus.DataqueryBuilder) *timeseries.PanelBuilder {
	p := timeseries.NewPanelBuilder().Title(title).Description(desc).Unit(unit).Span(w).Height(8).Datasource(ds).
		Legend(common.NewVizLegendOptionsBuilder().ShowLegend(true).DisplayMode(common.LegendDisplayModeTable).
			Placement(common.LegendPlacementBottom).Calcs([]string{"mean", "max", "lastNotNull"}))
	for _, q := range queries {
		p = p.WithTarget(q)
	}
	return p
}

func single(title, desc, unit, expr string) *stat.PanelBuilder {
	return stat.NewPanelBuilder().Title(title).Description(desc).Unit(unit).Span(6).Height(4).Datasource(ds).
		WithTarget(query(expr, "").Instant()).
		ReduceOptions(common.NewReduceDataOptionsBuilder().Calcs([]string{"lastNotNull"}))
}

func variables(b *dashboard.DashboardBuilder, instance bool) *dashboard.DashboardBuilder {
	b = b.WithVariable(dashboard.NewDatasourceVariableBuilder("datasource").Label("Data source").Type("prometheus")).
		WithVariable(dashboard.NewQueryVariableBuilder("job").Label("pileup job").Datasource(ds).
			Query(dashboard.StringOrMap{String: cog.ToPtr("label_values(pileup_poll_ok, job)")}).
			Refresh(dashboard.VariableRefreshOnTimeRangeChanged).Multi(true).IncludeAll(true))
	if instance {
		b = b.WithVariable(dashboard.NewQueryVariableBuilder("instance").Label("Server").Datasource(ds).
			Query(dashboard.StringOrMap{String: cog.ToPtr(`label_values(pileup_poll_ok{job=~"$job"}, instance)`)}).
			Refresh(dashboard.VariableRefreshOnTimeRangeChanged))
	}
	return b
}

// Stalls as annotations: one mark per capture at its time, titled with its
// class and carrying where the capture is (its verdict is in the capture).
func stallAnnotations(b *dashboard.DashboardBuilder, sel string) *dashboard.DashboardBuilder {
	return b.Annotation(dashboard.NewAnnotationQueryBuilder().Name("Stalls captured by pileup watch").
		Datasource(ds).Enable(true).IconColor("red").
		Expr(`pileup_last_capture_timestamp_seconds{` + sel + `} * 1000 * on (job, instance) group_left (class, url) pileup_last_capture_info{` + sel + `}`).
		UseValueForTime(true).Step("15s").
		TitleFormat("{{instance}}: {{class}}").TextFormat("{{class}} — {{url}} (pileup report shows the verdict)").TagKeys("instance,class"))
}

func base(uid, title, desc string) *dashboard.DashboardBuilder {
	return dashboard.NewDashboardBuilder(title).Uid(uid).Description(desc).Tags([]string{"pileup", "mysql", "mariadb"}).
		Refresh("30s").Time("now-3h", "now").Timezone(common.TimeZoneBrowser).Editable().
		Tooltip(dashboard.DashboardCursorSyncCrosshair)
}

func fleet() *dashboard.DashboardBuilder {
	sel := `job=~"$job"`
	b := variables(base("pileup-fleet", "pileup / Fleet", "Every server pileup watches: work, read efficiency, stalls and lag."), false)
	b = stallAnnotations(b, sel)
	return b.
		WithRow(dashboard.NewRowBuilder("Fleet")).
		WithPanel(single("Servers answering", "Servers whose last poll by pileup watch answered.", "none",
			`count(pileup_poll_ok{`+sel+`} == 1) or vector(0)`)).
		WithPanel(single("Servers not answering", "Servers whose last poll failed or timed out.", "none",
			`count(pileup_poll_ok{`+sel+`} == 0) or vector(0)`)).
		WithPanel(single("Stalls in the last hour", "Captures by pileup watch over the last hour, all servers.", "none",
			`sum(job:pileup_stalls:increase1h{`+sel+`}) or vector(0)`)).
		WithPanel(single("Rows read per row sent (fleet)", "Rows read across the job for each row sent to clients: close to 1 is best.", "none",
			`job:pileup_rows_read_per_row_sent:ratio5m{`+sel+`}`)).
		WithPanel(graph("Statements per second", "Client statements per second (pileup's own polls left out).", "ops", 12,
			query(`pileup_questions_rate{`+sel+`}`, "{{instance}}"))).
		WithPanel(graph("Threads running", "Statements executing now; a pile-up is the classic stall.", "none", 12,
			query(`pileup_threads_running{`+sel+`}`, "{{instance}}"))).
		WithRow(dashboard.NewRowBuilder("Read workload")).
		WithPanel(graph("Rows read per row sent", "As close to 1 as possible: far above it, queries scan what an index would find.", "none", 12,
			query(`instance:pileup_rows_read_per_row_sent:ratio5m{`+sel+`}`, "{{instance}}"))).
		WithPanel(graph("Pages read from disk per row read", "As close to 0 as possible.", "none", 12,
			query(`instance:pileup_physical_reads_per_row_read:ratio5m{`+sel+`}`, "{{instance}}"))).
		WithRow(dashboard.NewRowBuilder("Stalls and lag")).
		WithPanel(table.NewPanelBuilder().Title("Last capture per server").
			Description("The newest capture of each server: its class and where it is (pileup report opens it, with its verdict).").
			Span(24).Height(8).Datasource(ds).
			Footer(common.NewTableFooterOptionsBuilder().Show(false).Reducer([]string{"lastNotNull"})).
			WithTarget(query(`pileup_last_capture_info{`+sel+`} * on (job, instance) group_left () (time() - pileup_last_capture_timestamp_seconds{`+sel+`})`, "").
				Instant().Format(prometheus.PromQueryFormatTable))).
		WithPanel(graph("Stalls by class, last hour", "Captures per class over the last hour.", "none", 12,
			query(`job:pileup_stalls:increase1h{`+sel+`}`, "{{class}}"))).
		WithPanel(graph("Replica lag", "Seconds_Behind_Master of each replica (worst channel).", "s", 12,
			query(`pileup_replica_lag_seconds{`+sel+`}`, "{{instance}}")))
}

func server() *dashboard.DashboardBuilder {
	sel := `job=~"$job", instance="$instance"`
	b := variables(base("pileup-server", "pileup / Server", "One server: the read-workload ruleset, stall signatures and memory."), true)
	b = stallAnnotations(b, sel)
	return b.
		WithRow(dashboard.NewRowBuilder("Read workload")).
		WithPanel(graph("Rows read and sent", "Rows the server read from tables, and rows it sent to clients, per second.", "rowsps", 12,
			query(`pileup_rows_read_rate{`+sel+`}`, "read"), query(`pileup_rows_sent_rate{`+sel+`}`, "sent"))).
		WithPanel(graph("Rows read per row sent", "As close to 1 as possible.", "none", 12,
			query(`instance:pileup_rows_read_per_row_sent:ratio5m{`+sel+`}`, "5 min"),
			query(`pileup_rows_read_per_row_sent{`+sel+`}`, "last poll"))).
		WithPanel(graph("Pages read from disk per row read", "As close to 0 as possible.", "none", 8,
			query(`instance:pileup_physical_reads_per_row_read:ratio5m{`+sel+`}`, "5 min"))).
		WithPanel(graph("Buffer pool misses", "Page requests that went to disk.", "percentunit", 8,
			query(`instance:pileup_bp_miss:ratio5m{`+sel+`}`, "5 min"))).
		WithPanel(graph("Rows read per statement", "Rows read for each client statement.", "none", 8,
			query(`instance:pileup_rows_read_per_query:ratio5m{`+sel+`}`, "5 min"))).
		WithRow(dashboard.NewRowBuilder("Stall signatures")).
		WithPanel(graph("Threads", "Running statements, commands in progress, lock waits.", "none", 12,
			query(`pileup_threads_running{`+sel+`}`, "running"),
			query(`pileup_pl_active{`+sel+`}`, "active commands"),
			query(`pileup_pl_waiting_lock{`+sel+`}`, "waiting for a lock"),
			query(`pileup_innodb_row_lock_current_waits{`+sel+`}`, "waiting for a row lock"))).
		WithPanel(graph("Checkpoint age and I/O pressure", "Redo not yet checkpointed as a share of its maximum; share of time tasks stalled on I/O.", "percentunit", 12,
			query(`pileup_checkpoint_age_ratio{`+sel+`}`, "checkpoint age"),
			query(`pileup_io_pressure_ratio{`+sel+`}`, "I/O pressure"))).
		WithPanel(graph("Tables opened and connections", "Tables opened because the cache did not hold them; connections and threads started.", "ops", 12,
			query(`pileup_opened_tables_rate{`+sel+`}`, "tables opened"),
			query(`pileup_connections_rate{`+sel+`}`, "connections"),
			query(`pileup_threads_created_rate{`+sel+`}`, "threads created"))).
		WithPanel(graph("Poll cost", "What pileup's poll of the server cost: a rising cost is the server slowing down.", "s", 12,
			query(`pileup_poll_cost_seconds{`+sel+`}`, "poll"))).
		WithRow(dashboard.NewRowBuilder("Memory")).
		WithPanel(graph("Resident memory", "The server's resident memory and the limit it may use.", "bytes", 12,
			query(`pileup_mysqld_rss_bytes{`+sel+`}`, "resident"),
			query(`pileup_memory_limit_bytes{`+sel+`}`, "limit"))).
		WithPanel(graph("Memory growth", "How fast resident memory grows (negative: shrinks).", "Bps", 12,
			query(`pileup_mysqld_rss_growth_rate{`+sel+`}`, "growth")))
}

func replication() *dashboard.DashboardBuilder {
	sel := `job=~"$job", instance="$instance"`
	b := variables(base("pileup-replication", "pileup / Replication", "A replica's lag, what it is made of, and what pileup prefetch does about it."), true)
	b = b.WithVariable(dashboard.NewQueryVariableBuilder("prefetch_job").Label("prefetch job").Datasource(ds).
		Query(dashboard.StringOrMap{String: cog.ToPtr("label_values(pileup_prefetch_state, job)")}).
		Refresh(dashboard.VariableRefreshOnTimeRangeChanged).IncludeAll(true))
	psel := `job=~"$prefetch_job", instance="$instance"`
	b = stallAnnotations(b, sel)
	return b.
		WithRow(dashboard.NewRowBuilder("Lag composition")).
		WithPanel(graph("Lag", "How far the applier is behind: the server's Seconds_Behind_Master and prefetch's own measure of the relay log not yet applied.", "s", 12,
			query(`pileup_replica_lag_seconds{`+sel+`}`, "Seconds_Behind_Master"),
			query(`pileup_prefetch_backlog_seconds{`+psel+`}`, "relay log not applied"))).
		WithPanel(graph("Backlog", "Relay log bytes beyond the applier.", "bytes", 12,
			query(`pileup_prefetch_backlog_bytes{`+psel+`}`, "backlog"))).
		WithPanel(graph("Who reads the applier's pages", "Bytes the applier's threads read from storage themselves, and bytes prefetch's readers read for them.", "Bps", 12,
			query(`rate(pileup_prefetch_applier_read_bytes_total{`+psel+`}[$__rate_interval])`, "applier"),
			query(`rate(pileup_prefetch_prefetch_read_bytes_total{`+psel+`}[$__rate_interval])`, "prefetch"))).
		WithPanel(graph("Applier waits and commits", "Row-lock waits and redo flushes on the replica.", "ops", 12,
			query(`pileup_innodb_row_lock_waits_rate{`+sel+`}`, "row lock waits"),
			query(`pileup_innodb_os_log_fsyncs_rate{`+sel+`}`, "redo fsyncs"))).
		WithRow(dashboard.NewRowBuilder("Prefetch")).
		WithPanel(graph("Prefetch state", "0 warming, 1 ahead of a stopped applier, 2 nothing ahead, 3 under --min-lag, 4 SQL thread stopped, 5 no lag reported.", "none", 8,
			query(`pileup_prefetch_state{`+psel+`}`, "state"))).
		WithPanel(graph("How far ahead", "Events between the applier and the reader, and events warmed ahead of the applier.", "none", 8,
			query(`pileup_prefetch_distance_events{`+psel+`}`, "reader ahead"),
			query(`pileup_prefetch_warmed_ahead_events{`+psel+`}`, "warmed ahead"))).
		WithPanel(graph("Keys and statements", "Keys looked up and statements turned into reads per second.", "ops", 8,
			query(`rate(pileup_prefetch_keys_issued_total{`+psel+`}[$__rate_interval])`, "keys"),
			query(`rate(pileup_prefetch_statements_planned_total{`+psel+`}[$__rate_interval])`, "statements")))
}

// noErrors turns the SDK's empty error list (a typed nil) into nil.
func noErrors(err error) error {
	if errs, ok := err.(cog.BuildErrors); ok && len(errs) == 0 {
		return nil
	}
	return err
}

func main() {
	out := flag.String("out", "", "write the dashboards into this directory")
	check := flag.String("check", "", "check the dashboards in this directory")
	flag.Parse()
	plugins.RegisterDefaultPlugins()
	boards := map[string]*dashboard.DashboardBuilder{
		"pileup-fleet.json":       fleet(),
		"pileup-server.json":      server(),
		"pileup-replication.json": replication(),
	}
	names := make([]string, 0, len(boards))
	for name := range boards {
		names = append(names, name)
	}
	sort.Strings(names)
	failed := false
	for _, name := range names {
		b := boards[name]
		d, err := b.Build()
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
			os.Exit(1)
		}
		want, err := json.MarshalIndent(d, "", "  ")
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
			os.Exit(1)
		}
		want = append(want, '\n')
		switch {
		case *out != "":
			path := filepath.Join(*out, name)
			if err := os.WriteFile(path+".tmp", want, 0o644); err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
			if err := os.Rename(path+".tmp", path); err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
			fmt.Println("wrote", path)
		case *check != "":
			path := filepath.Join(*check, name)
			got, err := os.ReadFile(path)
			if err != nil {
				fmt.Fprintf(os.Stderr, "%s: %v\n", path, err)
				failed = true
				continue
			}
			if !bytes.Equal(got, want) {
				fmt.Fprintf(os.Stderr, "%s differs from what deploy/grafana/gen makes: run `go run . -out ..` in deploy/grafana/gen\n", path)
				failed = true
			}
			var parsed dashboard.Dashboard
			if err := noErrors(parsed.UnmarshalJSONStrict(got)); err != nil {
				fmt.Fprintf(os.Stderr, "%s: not a valid dashboard: %v\n", path, err)
				failed = true
				continue
			}
			if err := noErrors(parsed.Validate()); err != nil {
				fmt.Fprintf(os.Stderr, "%s: does not validate: %v\n", path, err)
				failed = true
				continue
			}
			fmt.Printf("%s: %d panels, strict and valid\n", path, len(parsed.Panels))
		default:
			fmt.Fprintln(os.Stderr, "give -out DIR or -check DIR")
			os.Exit(2)
		}
	}
	if failed {
		os.Exit(1)
	}
}
