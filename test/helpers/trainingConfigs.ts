/**
 * Whole, parsed configurations for tests that record or show a training run (TrainingRun is a union on `algorithm`,
 * each with its typed config).
 */
import { ApoConfig, GrpoConfig, type GrpoConfigInput } from '../../trainer-daemon/protocol';

/** A GRPO configuration on the tiny model, with `extra` over the defaults. */
export function testGrpoConfig(extra: Partial<GrpoConfigInput> = {}): GrpoConfig {
  return GrpoConfig.parse({
    model: { kind: 'tiny' },
    dataset: 'd',
    command: { argv: ['node', 'agent.js'], cwd: '/w' },
    ...extra,
  });
}

/** An APO configuration optimizing `prompt` on `sums`, with `extra` over the defaults. */
export function testApoConfig(extra: Partial<ApoConfig> = {}): ApoConfig {
  return ApoConfig.parse({
    algorithm: 'apo',
    command: { argv: ['node', 'agent.js'], cwd: '/w' },
    resource: 'prompt',
    dataset: 'sums',
    ...extra,
  });
}
