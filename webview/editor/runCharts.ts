/** A run tab's charts, pure: GRPO's named charts (grpoCharts.ts), else one chart per metric the algorithm records. */
import type { MetricSeries, TrainingAlgorithm } from '../../trainer-daemon/protocol/training';
import { formatValue, grpoCharts, type ChartData } from '../../trainer-daemon/protocol/grpoCharts';
import { seriesOf } from '../../trainer-daemon/protocol/chart';

export function runCharts(algorithm: TrainingAlgorithm, metrics: MetricSeries): ChartData[] {
  if (algorithm === 'grpo') return grpoCharts(metrics);
  return [...seriesOf(metrics.filter((point) => Number.isFinite(point.value)))].map(([metric, points]) => ({
    metric,
    title: metric,
    unit: 'number' as const,
    points,
    summary: `${metric}: ${formatValue(points[0]!.value, 'number')} → ${formatValue(points.at(-1)!.value, 'number')}`,
  }));
}
