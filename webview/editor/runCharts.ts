/**
 * A run tab's charts, pure: GRPO's and SFT's named charts (grpoCharts.ts), else one chart per metric the algorithm
 * records.
 */
import type { MetricSeries, TrainingAlgorithm } from '../../trainer-daemon/protocol/training';
import { formatValue, grpoCharts, sftCharts, type ChartData } from '../../trainer-daemon/protocol/ui/grpoCharts';
import { seriesOf } from '../../trainer-daemon/protocol/ui/chart';
import { metricDomain } from '../../trainer-daemon/protocol/ui/chartScale';
import { assertNever } from '../../trainer-daemon/protocol/assert';

export function runCharts(algorithm: TrainingAlgorithm, metrics: MetricSeries): ChartData[] {
  switch (algorithm) {
    case 'grpo':
      return grpoCharts(metrics);
    case 'sft':
      return sftCharts(metrics);
    case 'apo':
      return metricCharts(metrics);
    default:
      return assertNever(algorithm);
  }
}

/** One chart per metric the run records (APO's scores). */
function metricCharts(metrics: MetricSeries): ChartData[] {
  return [...seriesOf(metrics.filter((point) => Number.isFinite(point.value)))].map(([metric, points]) => {
    // A score by name (APO's val/batch scores) in [0, 1] keeps a 0–1 axis.
    const unit =
      /score|reward|accuracy/i.test(metric) && points.every((p) => p.value >= 0 && p.value <= 1)
        ? ('score' as const)
        : ('number' as const);
    return {
      metric,
      title: metric,
      unit,
      axisTitle: metric.split('/').at(-1)!.replace(/_/g, ' '),
      domain: metricDomain(
        unit,
        points.map((p) => p.value),
      ),
      points,
      summary: `${metric}: ${formatValue(points[0]!.value, unit)} → ${formatValue(points.at(-1)!.value, unit)}`,
    };
  });
}
